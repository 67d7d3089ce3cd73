#!/bin/bash
# bench/summarize.sh DIR -- turn DIR/results.csv (from compare.sh) into
# DIR/summary.md (medians over rounds, ratios B/A, B/C and B/F, fsync
# counts, CPU µs per transaction) and DIR/tps.png (TPS per measured client
# count and workload; needs gnuplot).
#
# A run of compare.sh -S with pmwal on the standby (configurations A B D R
# C, no F) gets its own tables: TPS of all five, the ratios B/A, D/A, D/B
# and D/R, and the real WAL fsyncs of the primary and of the standby per
# configuration (standby_wal_syncs), with the syncs the standby's ring
# answered in D (standby_ring_syncs).  Its legend names the level from
# machine.txt.
#
# Reads older results.csv files too: columns were only ever appended, and
# what a run did not record is left out of the tables (no F configuration:
# no F columns; no cpu_us_per_tx: no CPU column) or shown as "-".  Whether
# 1-client cells were pinned is read from DIR/machine.txt, where there is one.
set -eu

# A Markdown table's rows (after its two header lines) by workload, then clients.
sort_rows() {
	awk 'NR <= 2 {print; fflush(); next} {print | "sort -t\"|\" -k2,2 -k3,3n"}'
}
dir=$1
csv="$dir/results.csv"
have_f=$(awk -F, 'NR > 1 && $4 == "F" {found = 1} END {print found + 0}' "$csv")
have_cpu=$(awk -F, 'NR > 1 && $16 != "" {found = 1} END {print found + 0}' "$csv")
# compare.sh -S with pmwal on the standby too: D (both nodes) and R
have_d=$(awk -F, 'NR > 1 && $4 == "D" {found = 1} END {print found + 0}' "$csv")
level=
[ -f "$dir/machine.txt" ] && level=$(sed -n 's/^synchronous_commit level (-l): //p' "$dir/machine.txt")
# where the standby's WAL was: compare.sh -W puts it on a slow disk
standby_wal="its WAL on the same disk"
if [ -f "$dir/machine.txt" ] && grep -q "^the standby's pg_wal on a slow disk" "$dir/machine.txt"; then
	standby_wal="its pg_wal on a slow disk: every sync takes at least $(sed -n "s/^the standby's pg_wal on a slow disk (-W \([0-9]*\).*/\1/p" "$dir/machine.txt") µs, bench/slowdisk.c"
fi
level=${level:-LEVEL}
if [ ! -f "$dir/machine.txt" ]; then
	pinning="Pinning of 1-client cells not recorded (no machine.txt)."
elif grep -q '^1-client cells: server on CPU 1' "$dir/machine.txt"; then
	pinning="1-client cells pinned (server on CPU 1, pgbench on CPU 0), other cells unpinned."
elif grep -q '^no cell pinned' "$dir/machine.txt"; then
	pinning="Unpinned: no cell pinned to CPUs (-U)."
else
	pinning="Pinning of 1-client cells not recorded in machine.txt."
fi

# median of each metric per (workload, clients, config), over the rounds
# that recorded it: a column an older run did not have comes out empty
awk -F, 'NR > 1 {
	key = $2 "," $3 "," $4
	n[key]++
	# tps avg p99 fsyncs p99.9 max checkpoints cpu_us_per_tx
	# standby_wal_syncs standby_ring_syncs
	split("5 6 7 8 13 14 15 16 17 18", col, " ")
	for (m = 1; m <= 10; m++)
		if ($col[m] != "") v[m, key, ++cnt[m, key]] = $col[m]
}
function median(m, key,   c, i, j, t, x) {
	c = cnt[m, key] + 0
	if (c == 0) return ""
	for (i = 1; i <= c; i++) x[i] = v[m, key, i] + 0
	for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
	return (c % 2) ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2
}
function fmt(f, x) { return (x == "") ? "" : sprintf(f, x) }
END {
	# workload,clients,config,tps,avg,p99,fsyncs,rounds,p99.9,max,checkpoints,cpu,
	# standby fsyncs,standby ring syncs
	for (key in n)
		printf "%s,%s,%s,%s,%s,%d,%s,%s,%s,%s,%s,%s\n", key, fmt("%.1f", median(1, key)), fmt("%.3f", median(2, key)),
			fmt("%.3f", median(3, key)), fmt("%.0f", median(4, key)), n[key],
			fmt("%.3f", median(5, key)), fmt("%.3f", median(6, key)), fmt("%.0f", median(7, key)),
			fmt("%.1f", median(8, key)), fmt("%.0f", median(9, key)), fmt("%.0f", median(10, key))
}' "$csv" | sort -t, -k1,1 -k2,2n -k3,3 > "$dir/medians.csv"

# the tables of a run without pmwal on a standby (A B C, and F)
other_tables() {
	if [ "$have_f" = 1 ]; then
		echo "${LEGEND:-A = stock synchronous_commit=on, B = pmwal (emulated ring), C = synchronous_commit=off (no durability wait), F = synchronous_commit=on with fsync=off (a free sync: the ceiling of PostgreSQL's commit path, B's; unsafe).}"
	else
		echo "${LEGEND:-A = stock synchronous_commit=on, B = pmwal (emulated ring), C = synchronous_commit=off (ceiling).}"
	fi
	[ "$have_cpu" = 1 ] && echo "CPU: whole-machine CPU time (user+nice+system+irq+softirq) per transaction, µs."
	echo
	# medians.csv: workload,clients,config,tps,avg,p99,fsyncs,rounds,p99.9,max,checkpoints,cpu
	awk -F, -v f="$have_f" -v cpu="$have_cpu" '
	function ratio(x, y) { return (y > 0 && x != "") ? sprintf("%.2f", x / y) : "-" }
	function num(fmt, x) { return (x == "") ? "-" : sprintf(fmt, x) }
	{
		key = $1 "," $2; cells[key] = 1
		tps[key, $3] = $4; avg[key, $3] = $5; p99[key, $3] = $6; syn[key, $3] = $7; cu[key, $3] = $12
	}
	END {
		hdr = "| workload | clients | TPS A | TPS B | TPS C |"; al = "|---|---:|---:|---:|---:|"
		if (f) { hdr = hdr " TPS F |"; al = al "---:|" }
		hdr = hdr " B/A | B/C |"; al = al "---:|---:|"
		if (f) { hdr = hdr " B/F |"; al = al "---:|" }
		hdr = hdr " p99 ms A | p99 ms B | p99 ms C |"; al = al "---:|---:|---:|"
		if (f) { hdr = hdr " p99 ms F |"; al = al "---:|" }
		hdr = hdr " avg ms B | fsyncs A | fsyncs B | fsyncs A/B |"; al = al "---:|---:|---:|---:|"
		if (cpu) { hdr = hdr (f ? " CPU µs/tx A/B/C/F |" : " CPU µs/tx A/B/C |"); al = al "---|" }
		print hdr; print al
		nc = split(f ? "A B C F" : "A B C", cf, " ")
		for (key in cells) {
			split(key, k, ",")
			if (syn[key, "A"] == "" || syn[key, "B"] == "")
				fr = "-"
			else
				fr = (syn[key, "B"] > 0) ? sprintf("%.0fx", syn[key, "A"] / syn[key, "B"]) : "all (B: 0)"
			line = sprintf("| %s | %s | %s | %s | %s |", k[1], k[2],
				num("%.0f", tps[key, "A"]), num("%.0f", tps[key, "B"]), num("%.0f", tps[key, "C"]))
			if (f) line = line sprintf(" %s |", num("%.0f", tps[key, "F"]))
			line = line sprintf(" %s | %s |", ratio(tps[key, "B"], tps[key, "A"]), ratio(tps[key, "B"], tps[key, "C"]))
			if (f) line = line sprintf(" %s |", ratio(tps[key, "B"], tps[key, "F"]))
			line = line sprintf(" %s | %s | %s |", num("%.3f", p99[key, "A"]), num("%.3f", p99[key, "B"]), num("%.3f", p99[key, "C"]))
			if (f) line = line sprintf(" %s |", num("%.3f", p99[key, "F"]))
			line = line sprintf(" %s | %s | %s | %s |", num("%.3f", avg[key, "B"]), num("%d", syn[key, "A"]), num("%d", syn[key, "B"]), fr)
			if (cpu) {
				c = ""
				for (i = 1; i <= nc; i++)
					c = c (i > 1 ? "/" : "") ((cu[key, cf[i]] == "") ? "-" : sprintf("%.0f", cu[key, cf[i]]))
				line = line " " c " |"
			}
			print line
		}
	}' "$dir/medians.csv" | sort_rows
	# the latency tail, where the run recorded it (p99.9, max; older runs did not)
	if awk -F, 'NR > 1 && $13 != "" {found = 1} END {exit !found}' "$csv"; then
		echo
		echo "Latency tail (medians over rounds; checkpoints: timed or requested ones that fell inside the cell)."
		echo
		awk -F, -v f="$have_f" '
		function num(fmt, x) { return (x == "") ? "-" : sprintf(fmt, x) }
		{
			key = $1 "," $2; cells[key] = 1
			p999[key, $3] = $9; mx[key, $3] = $10; ck[key, $3] = $11
		}
		END {
			if (f) {
				print "| workload | clients | p99.9 ms A | p99.9 ms B | p99.9 ms F | max ms A | max ms B | max ms C | max ms F | checkpoints A/B/C/F |"
				print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
			} else {
				print "| workload | clients | p99.9 ms A | p99.9 ms B | max ms A | max ms B | max ms C | checkpoints A/B/C |"
				print "|---|---:|---:|---:|---:|---:|---:|---|"
			}
			for (key in cells) {
				split(key, k, ",")
				if (f)
					printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s/%s/%s |\n", k[1], k[2],
						num("%.3f", p999[key, "A"]), num("%.3f", p999[key, "B"]), num("%.3f", p999[key, "F"]),
						num("%.3f", mx[key, "A"]), num("%.3f", mx[key, "B"]), num("%.3f", mx[key, "C"]), num("%.3f", mx[key, "F"]),
						num("%d", ck[key, "A"]), num("%d", ck[key, "B"]), num("%d", ck[key, "C"]), num("%d", ck[key, "F"])
				else
					printf "| %s | %s | %s | %s | %s | %s | %s | %s/%s/%s |\n", k[1], k[2],
						num("%.3f", p999[key, "A"]), num("%.3f", p999[key, "B"]),
						num("%.3f", mx[key, "A"]), num("%.3f", mx[key, "B"]), num("%.3f", mx[key, "C"]),
						num("%d", ck[key, "A"]), num("%d", ck[key, "B"]), num("%d", ck[key, "C"])
			}
		}' "$dir/medians.csv" | sort_rows
	fi
}

# the tables of compare.sh -S with pmwal on the standby too: A B D R C
standby_tables() {
	echo "${LEGEND:-A = stock synchronous replication: synchronous_commit=$level, pmwal.enabled=off on the primary and on the standby (a streaming standby on this machine, $standby_wal). B = pmwal on the primary only, synchronous_commit=$level: the standby's walreceiver fdatasyncs its WAL as in stock PostgreSQL. D = pmwal on both nodes, synchronous_commit=$level: the standby's ring (its own, emulated in /dev/shm) answers the walreceiver's WAL syncs. R = pmwal on the primary only at synchronous_commit=remote_write (the standby has written the WAL, not flushed it, when the primary acknowledges): the most D can reach while keeping on's meaning. C = synchronous_commit=off, pmwal off on both (no wait at all, not even for the standby). A, B, D and R run at fsync=on on both nodes.}"
	[ "$have_cpu" = 1 ] && echo "CPU: whole-machine CPU time (user+nice+system+irq+softirq) per transaction, µs (both nodes and pgbench share the machine)."
	echo
	# medians.csv: workload,clients,config,tps,avg,p99,fsyncs,rounds,p99.9,max,checkpoints,cpu,sfsyncs,sring
	awk -F, -v cpu="$have_cpu" '
	function ratio(x, y) { return (y > 0 && x != "") ? sprintf("%.2f", x / y) : "-" }
	function num(fmt, x) { return (x == "") ? "-" : sprintf(fmt, x) }
	{
		key = $1 "," $2; cells[key] = 1
		tps[key, $3] = $4; p99[key, $3] = $6; cu[key, $3] = $12
	}
	END {
		hdr = "| workload | clients | TPS A | TPS B | TPS D | TPS R | TPS C | B/A | D/A | D/B | D/R | p99 ms A | p99 ms B | p99 ms D | p99 ms R |"
		al = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		if (cpu) { hdr = hdr " CPU µs/tx A/B/D/R/C |"; al = al "---|" }
		print hdr; print al
		nc = split("A B D R C", cf, " ")
		for (key in cells) {
			split(key, k, ",")
			line = sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", k[1], k[2],
				num("%.0f", tps[key, "A"]), num("%.0f", tps[key, "B"]), num("%.0f", tps[key, "D"]),
				num("%.0f", tps[key, "R"]), num("%.0f", tps[key, "C"]),
				ratio(tps[key, "B"], tps[key, "A"]), ratio(tps[key, "D"], tps[key, "A"]),
				ratio(tps[key, "D"], tps[key, "B"]), ratio(tps[key, "D"], tps[key, "R"]),
				num("%.3f", p99[key, "A"]), num("%.3f", p99[key, "B"]), num("%.3f", p99[key, "D"]), num("%.3f", p99[key, "R"]))
			if (cpu) {
				c = ""
				for (i = 1; i <= nc; i++)
					c = c (i > 1 ? "/" : "") ((cu[key, cf[i]] == "") ? "-" : sprintf("%.0f", cu[key, cf[i]]))
				line = line " " c " |"
			}
			print line
		}
	}' "$dir/medians.csv" | sort_rows
	echo
	echo "Real WAL fsyncs per cell (medians), primary / standby. The primary's: PostgreSQL's sync calls less those its ring answered, plus pmwal's own. The standby's: its walreceiver's syncs that no ring answered (pmwal_status.pass_syncs), plus pmwal's own real syncs there (segments_synced + dir_syncs). Ring-served on the standby: the walreceiver's syncs its ring answered in D (ring_syncs; 0 in every other configuration, which compare.sh checks)."
	echo
	awk -F, '
	function num(fmt, x) { return (x == "") ? "-" : sprintf(fmt, x) }
	{
		key = $1 "," $2; cells[key] = 1
		syn[key, $3] = $7; ssyn[key, $3] = $13; sring[key, $3] = $14
	}
	END {
		print "| workload | clients | fsyncs A | fsyncs B | fsyncs D | fsyncs R | fsyncs C | ring-served on the standby, D |"
		print "|---|---:|---:|---:|---:|---:|---:|---:|"
		n = split("A B D R C", cf, " ")
		for (key in cells) {
			split(key, k, ",")
			line = sprintf("| %s | %s |", k[1], k[2])
			for (i = 1; i <= n; i++)
				line = line sprintf(" %s / %s |", num("%d", syn[key, cf[i]]), num("%d", ssyn[key, cf[i]]))
			print line sprintf(" %s |", num("%d", sring[key, "D"]))
		}
	}' "$dir/medians.csv" | sort_rows
	echo
	echo "Latency tail (medians over rounds; checkpoints: timed or requested ones that fell inside the cell)."
	echo
	awk -F, '
	function num(fmt, x) { return (x == "") ? "-" : sprintf(fmt, x) }
	{
		key = $1 "," $2; cells[key] = 1
		p999[key, $3] = $9; mx[key, $3] = $10; ck[key, $3] = $11
	}
	END {
		print "| workload | clients | p99.9 ms A | p99.9 ms B | p99.9 ms D | p99.9 ms R | max ms A | max ms B | max ms D | max ms R | max ms C | checkpoints A/B/D/R/C |"
		print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
		for (key in cells) {
			split(key, k, ",")
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s/%s/%s/%s |\n", k[1], k[2],
				num("%.3f", p999[key, "A"]), num("%.3f", p999[key, "B"]), num("%.3f", p999[key, "D"]), num("%.3f", p999[key, "R"]),
				num("%.3f", mx[key, "A"]), num("%.3f", mx[key, "B"]), num("%.3f", mx[key, "D"]), num("%.3f", mx[key, "R"]),
				num("%.3f", mx[key, "C"]),
				num("%d", ck[key, "A"]), num("%d", ck[key, "B"]), num("%d", ck[key, "D"]), num("%d", ck[key, "R"]), num("%d", ck[key, "C"])
		}
	}' "$dir/medians.csv" | sort_rows
}

{
	echo "Medians over $(awk -F, 'NR>1 {print $1}' "$csv" | sort -u | wc -l) interleaved rounds. $pinning"
	if [ "$have_d" = 1 ]; then
		standby_tables
	else
		other_tables
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
		# clients, TPS A, TPS B, TPS C, TPS F, TPS D, TPS R
		awk -F, -v w="$w" '$1 == w { c[$2] = 1; t[$2, $3] = $4 }
			END { for (k in c) printf "%s %s %s %s %s %s %s\n", k, t[k, "A"] + 0, t[k, "B"] + 0, t[k, "C"] + 0, t[k, "F"] + 0,
				t[k, "D"] + 0, t[k, "R"] + 0 }' \
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
			if [ "$have_d" = 1 ]; then
				echo "plot '$dir/plot_$w.dat' using 2:xtic(1) title 'A stock sync rep ($level)', \
'' using 3 title 'B pmwal on the primary', '' using 6 title 'D pmwal on both nodes', \
'' using 7 title 'R pmwal on the primary, remote_write', '' using 4 title 'C synchronous_commit=off'"
				continue
			fi
			f_bars=
			[ "$have_f" = 1 ] && f_bars=", '' using 5 title 'F fsync=off (unsafe ceiling)'"
			echo "plot '$dir/plot_$w.dat' using 2:xtic(1) title 'A stock sync commit', \
'' using 3 title 'B pmwal', '' using 4 title 'C synchronous_commit=off'$f_bars"
		done
		echo "unset multiplot"
	} | gnuplot
	rm -f "$dir"/plot_*.dat
	echo "plot: $dir/tps.png"
fi
