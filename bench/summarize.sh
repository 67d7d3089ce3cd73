#!/bin/bash
# bench/summarize.sh DIR -- turn DIR/results.csv (from compare.sh) into
# DIR/summary.md (medians over rounds, ratios B/A and B/C, fsync counts)
# and DIR/tps.png (TPS per measured client count and workload; needs gnuplot).
set -eu
dir=$1
csv="$dir/results.csv"

# median of each metric per (workload, clients, config)
awk -F, 'NR > 1 {
	key = $2 "," $3 "," $4
	n[key]++
	tps[key, n[key]] = $5; avg[key, n[key]] = $6; p99[key, n[key]] = $7; syn[key, n[key]] = $8
	p999[key, n[key]] = $13; mx[key, n[key]] = $14; ck[key, n[key]] = $15
}
function median(arr, key, cnt,   i, j, t, v) {
	for (i = 1; i <= cnt; i++) v[i] = arr[key, i] + 0
	for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
	return (cnt % 2) ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
}
END {
	for (key in n)
		printf "%s,%.1f,%.3f,%.3f,%.0f,%d,%.3f,%.3f,%.0f\n", key, median(tps, key, n[key]), median(avg, key, n[key]),
			median(p99, key, n[key]), median(syn, key, n[key]), n[key],
			median(p999, key, n[key]), median(mx, key, n[key]), median(ck, key, n[key])
}' "$csv" | sort -t, -k1,1 -k2,2n -k3,3 > "$dir/medians.csv"

{
	echo "Medians over $(awk -F, 'NR>1 {print $1}' "$csv" | sort -u | wc -l) interleaved rounds."
	echo "${LEGEND:-A = stock synchronous_commit=on, B = pmwal (emulated ring), C = synchronous_commit=off (ceiling).}"
	echo
	echo "| workload | clients | TPS A | TPS B | TPS C | B/A | B/C | p99 ms A | p99 ms B | p99 ms C | avg ms B | fsyncs A | fsyncs B | fsyncs A/B |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F, '{
		key = $1 "," $2; cells[key] = 1
		tps[key, $3] = $4; avg[key, $3] = $5; p99[key, $3] = $6; syn[key, $3] = $7
	}
	END {
		for (key in cells) {
			split(key, k, ",")
			fr = (syn[key, "B"] > 0) ? sprintf("%.0fx", syn[key, "A"] / syn[key, "B"]) : "all (B: 0)"
			printf "| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %d | %d | %s |\n",
				k[1], k[2], tps[key, "A"], tps[key, "B"], tps[key, "C"],
				tps[key, "B"] / tps[key, "A"], tps[key, "B"] / tps[key, "C"],
				p99[key, "A"], p99[key, "B"], p99[key, "C"], avg[key, "B"],
				syn[key, "A"], syn[key, "B"], fr
		}
	}' "$dir/medians.csv" | sort -t'|' -k2,2 -k3,3n
	# the latency tail, where the run recorded it (p99.9, max; older runs did not)
	if awk -F, 'NR > 1 && $13 != "" {found = 1} END {exit !found}' "$csv"; then
		echo
		echo "Latency tail (medians over rounds; checkpoints: timed or requested ones that fell inside the cell)."
		echo
		echo "| workload | clients | p99.9 ms A | p99.9 ms B | max ms A | max ms B | max ms C | checkpoints A/B/C |"
		echo "|---|---:|---:|---:|---:|---:|---:|---|"
		awk -F, '{
			key = $1 "," $2; cells[key] = 1
			p999[key, $3] = $9; mx[key, $3] = $10; ck[key, $3] = $11
		}
		END {
			for (key in cells) {
				split(key, k, ",")
				printf "| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %d/%d/%d |\n", k[1], k[2],
					p999[key, "A"], p999[key, "B"], mx[key, "A"], mx[key, "B"], mx[key, "C"],
					ck[key, "A"], ck[key, "B"], ck[key, "C"]
			}
		}' "$dir/medians.csv" | sort -t'|' -k2,2 -k3,3n
	fi
} > "$dir/summary.md"
cat "$dir/summary.md"

# The plot shows what was measured and nothing between: per workload, a
# group of bars for each client count that was run (no line drawn through
# client counts that were not, and no axis ticks at them).
if command -v gnuplot >/dev/null; then
	workloads=$(cut -d, -f1 "$dir/medians.csv" | sort -u)
	nw=$(echo "$workloads" | wc -l)
	for w in $workloads; do
		# clients, TPS A, TPS B, TPS C
		awk -F, -v w="$w" '$1 == w { c[$2] = 1; t[$2, $3] = $4 }
			END { for (k in c) printf "%s %s %s %s\n", k, t[k, "A"] + 0, t[k, "B"] + 0, t[k, "C"] + 0 }' \
			"$dir/medians.csv" | sort -n > "$dir/plot_$w.dat"
	done
	{
		echo "set terminal pngcairo size $((520 * nw)),480 noenhanced"
		echo "set output '$dir/tps.png'"
		echo "set multiplot layout 1,$nw"
		echo "set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1"
		echo "set xlabel 'clients (as measured)'; set ylabel 'TPS (median)'; set key outside bottom center vertical; set yrange [0:*]; set grid ytics"
		for w in $workloads; do
			echo "set title '$w'"
			echo "plot '$dir/plot_$w.dat' using 2:xtic(1) title 'A stock sync commit', \
'' using 3 title 'B pmwal', '' using 4 title 'C synchronous_commit=off'"
		done
		echo "unset multiplot"
	} | gnuplot
	rm -f "$dir"/plot_*.dat
	echo "plot: $dir/tps.png"
fi
