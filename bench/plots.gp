# bench/plots.gp: the overlap and gateway plots, from the .dat files
# bench/overlap.c and bench/gateway.py write.  gnuplot -e "dir='build/bench'"
set terminal pngcairo size 800,500 font "sans,10" noenhanced
set grid

set output dir."/overlap.png"
set title "Overlap: reserves/s with every findAndModify blocked 50 ms"
set xlabel "dispatcher threads T"
set ylabel "reserves per second"
set logscale xy 2
set key top left
plot dir."/overlap.dat" using 1:2 with linespoints lw 2 title "ideal T/L", \
     ""                 using 1:3 with linespoints lw 2 title "bare mongoc, T threads", \
     ""                 using 1:4 with linespoints lw 2 title "resv, T threads, 4T in flight"

unset logscale
set output dir."/gateway.png"
unset xlabel
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set xtics rotate by -20
set key top right
set multiplot layout 1,2 title "Sign-up gateway under wrk (1, 2 and 4 nginx workers, 16 connections)"
set title "throughput"
set ylabel "requests per second"
plot dir."/gateway.dat" using 2:xtic(1) title "req/s"
set title "latency"
set ylabel "latency (ms)"
set logscale y
plot dir."/gateway.dat" using 3:xtic(1) title "p50", "" using 4 title "p99"
unset multiplot
