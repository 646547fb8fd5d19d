# Sourced by the end-to-end MPI scripts: finding a rank's process under mpirun.

# The pid of world rank $2 among the children of mpirun $1 (waits until it exists).
rank_pid() {
  local p
  for _ in $(seq 200); do
    for p in $(pgrep -P "$1"); do
      if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
        echo "$p"; return 0
      fi
    done
    sleep 0.1
  done
  return 1
}
