# bench/plots.gp: the overlap, gateway and churn plots, from the .dat files
# bench/overlap.c, bench/gateway.py and bench/nginx_churn.sh write.  gnuplot -e "dir='build/bench'"
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

unset style
unset logscale
set style data linespoints
set xtics norotate
set output dir."/churn.png"
set title "Churn in one nginx worker: distinct keys, ttl 1 s, paced in wall time (bench/nginx_churn.sh)"
set xlabel "keys reserved (millions)"
set ylabel "MiB"
set key bottom right
plot dir."/churn.dat" using ($1/1e6):($2/1024) lw 2 pt 7 ps 0.5 title "memory store (sweep_grace_ms 1000): worker RSS", \
     ""               using ($1/1e6):($5/1048576) lw 1 pt 6 ps 0.5 dt 2 title "memory store: bytes of its entries (store:stats)", \
     ""               using ($1/1e6):($3/1024) lw 2 pt 5 ps 0.5 title "ngx.shared.DICT:add (64 MB zone): worker RSS", \
     ""               using ($1/1e6):($6/1024) lw 1 pt 4 ps 0.5 dt 2 title "ngx.shared.DICT: zone pages in use"
