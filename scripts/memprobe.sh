#!/usr/bin/env bash
# Peak memory of a command, split into private and file-backed pages, as docs/BENCHMARKS.md reports
# it for picolm and llama.cpp side by side:
#   scripts/memprobe.sh OUT COMMAND [ARGS...]
# Runs COMMAND (stdout/stderr to OUT.stdout / OUT.stderr), samples /proc/PID/status every 0.1 s and
# writes to OUT: the exit code and the peaks of RssAnon (private), RssFile (file-backed, e.g. an
# mmapped model) and of their sum, in kB. Linux only.
set -u
out=$1
shift
"$@" > "$out.stdout" 2> "$out.stderr" &
pid=$!
peak_anon=0 peak_file=0 peak_sum=0
while kill -0 "$pid" 2> /dev/null; do
  if read -r anon file < <(awk '/^RssAnon/{a=$2} /^RssFile/{f=$2} END{print a+0, f+0}' "/proc/$pid/status" 2> /dev/null); then
    [ "$anon" -gt "$peak_anon" ] && peak_anon=$anon
    [ "$file" -gt "$peak_file" ] && peak_file=$file
    [ $((anon + file)) -gt "$peak_sum" ] && peak_sum=$((anon + file))
  fi
  sleep 0.1
done
wait "$pid"
rc=$?
echo "rc=$rc peak_anon_kb=$peak_anon peak_file_kb=$peak_file peak_sum_kb=$peak_sum" > "$out"
exit "$rc"
