# Shared by the device scripts (source it): the binary, the results folder (tarred into $OUT at the
# end: the device tool does not bring back deep folders), the log and the elapsed time.
MK=${MK:-devbin/mk}
R=/tmp/mkresults
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# Packs $R into $OUT: timeline.json gzipped (Perfetto opens .json.gz), the tar split into 15 MB
# parts (the device tool brings back files of at most 16 MiB, 8 in all): cat results.tgz.* | tar xz.
pack() {
  find "$R" -name timeline.json -exec gzip -9 {} \;
  tar czf - -C "$R" . | split -b 15m -d - "$OUT/results.tgz."
  ls -la "$OUT" | log
}
