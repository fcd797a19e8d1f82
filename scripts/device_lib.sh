# Shared by the device scripts (source it): the binary, the results folder (tarred into $OUT at the
# end: the device tool does not bring back deep folders), the log and the elapsed time.
MK=${MK:-devbin/mk}
R=/tmp/mkresults
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
