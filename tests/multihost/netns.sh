#!/usr/bin/env bash
# Runs across "hosts" simulated by Linux network namespaces (issue 18):
#   netns.sh PARITY SCENARIO CASE [HOSTS] [TRIES]
# Makes HOSTS namespaces (default 2) h0..h{N-1}, each with one veth (e0, 10.213.0.{1+i}/24)
# whose other end is a port of a bridge in a namespace of its own; nothing is added to the
# host's own network, and every namespace (with whatever still runs in it) is removed on exit,
# also on failure. SCENARIO is a W-rank layout, W divisible by HOSTS.
# CASE:
#   env        each rank started alone in its host's namespace (`ip netns exec hI parity run
#              SCENARIO --as-rank`) with torchrun-style RANK, WORLD_SIZE, LOCAL_RANK,
#              LOCAL_WORLD_SIZE, MASTER_ADDR=10.213.0.1, MASTER_PORT; gloo over TCP, the TCP
#              store on rank 0; the verdict must PASS and every rank exit 0
#   nodes      one `parity run SCENARIO --nnodes HOSTS --node-rank I --master 10.213.0.1:PORT` per
#              namespace, each starting its W/HOSTS ranks; every launcher must exit 0
#   launch     the same with `parity launch --nnodes ... -n W/HOSTS -- run SCENARIO --as-rank`
#   mpirun_gloo, mpirun_mpi   mpirun in h0 starts the ranks in every namespace (OpenMPI's rsh
#              agent replaced by `ip netns exec`, no ssh), gloo bootstrapped over MPI or mpi itself
#   cut        a long run as in `env` (TRIES times; PARITY_MULTIHOST_BOUND_S, default 10, the bound); after start-up the last host's veth is taken down: every
#              rank must end with exit 3 (infrastructure failed) within the collective timeout
#              plus a bound, rank 0 naming the cut host and all its ranks ("host vm (10.213.0.2) is
#              unreachable: ranks 4-7"), some rank naming a rank of the cut host and its address
#              (rank 0 names the member it waited for, with its address), and no process may be left in
#              any namespace. Repeated TRIES times; prints the worst time.
#   redis      as `env`, but the ranks meet on a redis-server in h0 (PARITY_STORE=redis://10.213.0.1:6390/RUN,
#              no MASTER_ADDR); the verdict must PASS, and no key of the run may be left on the server
#   redis_gone W-1 ranks wait in the rendezvous on the Redis store, whose server is then killed: every
#              rank must end with exit 3 within 15 s, naming the store
#   host_dies  one `parity run --nnodes` per namespace (as in `nodes`); mid-run every process of
#              the last namespace is killed (-9: the host dies): the other launchers must end
#              with exit 3 well before the collective timeout, naming a rank of the dead host
#              and its address, with no process left
# Prints "multihost CASE: PASS ..." (exit 0), "multihost CASE: FAIL: why" (exit 1), or
# "multihost CASE: SKIP: why" (exit 77) where namespaces cannot be made (not root, no `ip`).
set -u
parity=$1 scenario=$2 case=$3 hosts=${4:-2} tries=${5:-1}
say() { echo "multihost $case: $*"; }
skip() { say "SKIP: $*"; exit 77; }
[ "$EUID" -eq 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
world=$(sed -n 's/.*"world": *\([0-9]*\).*/\1/p' "$scenario" | head -1)
[ -n "$world" ] && [ $((world % hosts)) -eq 0 ] || { say "FAIL: world '$world' of $scenario does not split over $hosts hosts"; exit 1; }
per=$((world / hosts))
tag=pmh$$
work=$(mktemp -d)
namespaces=()
cleanup() {
  local ns pid
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  # PARITY_MULTIHOST_LOGS=DIR keeps the last try's logs (rank<r>.log, node<h>.log, mpirun.log)
  [ -n "${PARITY_MULTIHOST_LOGS:-}" ] && mkdir -p "$PARITY_MULTIHOST_LOGS" && cp "$work"/*.log "$PARITY_MULTIHOST_LOGS"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  say "FAIL: $*"
  for f in "$work"/*.log; do [ -f "$f" ] && { echo "---- $(basename "$f")"; tail -15 "$f"; }; done
  exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
addr() { echo "10.213.0.$(($1 + 1))"; }

# ---- the namespaces: hosts h0.., a bridge joining them ----
ip netns add "$tag-br" 2>"$work/ns.err" || skip "ip netns add failed: $(head -1 "$work/ns.err")"
namespaces+=("$tag-br")
setup() {
  ip -n "$tag-br" link add br0 type bridge && ip -n "$tag-br" link set br0 up || return 1
  for h in $(seq 0 $((hosts - 1))); do
    ip netns add "$tag-h$h" || return 1
    namespaces+=("$tag-h$h")
    ip -n "$tag-br" link add "b$h" type veth peer name e0 netns "$tag-h$h" &&
      ip -n "$tag-br" link set "b$h" master br0 up &&
      ip -n "$tag-h$h" addr add "$(addr "$h")/24" dev e0 &&
      ip -n "$tag-h$h" link set e0 up && ip -n "$tag-h$h" link set lo up || return 1
  done
}
setup 2>"$work/ns.err" || skip "cannot build the veth/bridge network: $(head -1 "$work/ns.err")"
for h in $(seq 1 $((hosts - 1))); do  # (no ping here: the ranks' own rendezvous is the reachability test)
  ip -n "$tag-h$h" route get "$(addr 0)" >/dev/null 2>&1 || fail "h$h has no route to h0"
done

port=29500
timeout_ms=60000
pids=()
rdzv=(MASTER_ADDR="$(addr 0)" MASTER_PORT=$port)  # how env ranks meet: rank 0's TCP store, or PARITY_STORE
ranks=$world                                     # how many of the world start_env_ranks starts
# Every rank alone in its host's namespace, torchrun-style; extra arguments go to parity run.
start_env_ranks() {
  pids=()
  rm -f "$work"/rank*.log  # a try must not read the last one's log before its own truncates it
  for r in $(seq 0 $((ranks - 1))); do
    h=$((r / per))
    ip netns exec "$tag-h$h" env PARITY_COMM_TRACE="${PARITY_COMM_TRACE:-}" RANK=$r WORLD_SIZE=$world LOCAL_RANK=$((r % per)) LOCAL_WORLD_SIZE=$per \
      "${rdzv[@]}" PARITY_COMM_TIMEOUT_MS=$timeout_ms \
      "$parity" run "$scenario" --as-rank "$@" >"$work/rank$r.log" 2>&1 &
    pids+=($!)
  done
}
# One launcher per host: `parity run --nnodes` ($1 = nodes) or `parity launch --nnodes` (launch).
start_launchers() {
  pids=()
  rm -f "$work"/node*.log
  for h in $(seq 0 $((hosts - 1))); do
    nodes=(--nnodes "$hosts" --node-rank "$h" --master "$(addr 0):$port" --timeout $((timeout_ms / 1000)))
    if [ "$1" = nodes ]; then
      ip netns exec "$tag-h$h" "$parity" run "$scenario" "${nodes[@]}" "${@:2}" >"$work/node$h.log" 2>&1 &
    else
      ip netns exec "$tag-h$h" "$parity" launch "${nodes[@]}" -n $per -- run "$scenario" --as-rank "${@:2}" \
        >"$work/node$h.log" 2>&1 &
    fi
    pids+=($!)
  done
}
# Until rank 0 (PARITY_COMM_TRACE=0) has traced 50 collectives into $1: the step loop runs.
wait_traced() {
  for _ in $(seq 600); do [ "$(grep -c '^comm trace' "$1")" -ge 50 ] && return 0; sleep 0.1; done
  fail "rank 0 did not reach its step loop within 60 s"
}
# Waits for every pid in pids (at most $1 s); the exit codes go to codes[].
codes=()
wait_all() {
  local limit=$1 i
  for _ in $(seq $((limit * 10))); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  codes=()
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then codes+=(running); else wait "${pids[$i]}"; codes+=($?); fi
  done
}
no_orphans() {
  local ns left=""
  for _ in $(seq 30); do
    left=""
    for ns in "${namespaces[@]}"; do left+=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' '); done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "processes left in the namespaces: $left"
}
# A redis-server in h0 on 10.213.0.1:6390 (no persistence); the env ranks meet there.
redis_port=6390
start_redis() {
  command -v redis-server >/dev/null 2>&1 || skip "no redis-server (Debian package redis-server)"
  ip netns exec "$tag-h0" redis-server --bind "$(addr 0)" --port $redis_port --save "" --appendonly no \
    --protected-mode no >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    [ "$(ip netns exec "$tag-h0" redis-cli -h "$(addr 0)" -p $redis_port ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  run_id=run$$
  rdzv=(PARITY_STORE="redis://$(addr 0):$redis_port/$run_id")
}
redis_keys() { ip netns exec "$tag-h0" redis-cli -h "$(addr 0)" -p $redis_port --scan --pattern "parity:$1:*" | wc -l; }
# Bytes the last host received on its veth: the proof that the ranks talked across hosts.
rx_bytes() { ip -s -n "$tag-h$((hosts - 1))" link show e0 | awk '/RX:/ { getline; print $1; exit }'; }
check_pass() {  # $1: the log holding the verdict, $2: what ran
  grep -Eq "^(\[[0-9]+\] )?verdict: PASS" "$1" || fail "$2: no PASS verdict in $(basename "$1")"
  for i in "${!codes[@]}"; do [ "${codes[$i]}" = 0 ] || fail "$2: process $i ended with ${codes[$i]}, want 0"; done
  no_orphans
  rx=$(rx_bytes)
  [ "$hosts" -eq 1 ] || [ "${rx:-0}" -gt 100000 ] || fail "$2: only ${rx:-0} bytes crossed h$((hosts - 1))'s veth: the ranks did not talk across hosts"
}

case $case in
  env)
    t0=$(now)
    start_env_ranks
    wait_all 300
    t=$(elapsed "$t0" "$(now)")
    check_pass "$work/rank0.log" "$world ranks on $hosts hosts"
    say "PASS: $world ranks on $hosts namespaces, gloo over TCP, TCP store on rank 0: verdict PASS in ${t} s ($rx bytes into h$((hosts - 1)))"
    ;;
  redis)
    start_redis
    t0=$(now)
    start_env_ranks
    wait_all 300
    t=$(elapsed "$t0" "$(now)")
    left=$(redis_keys "$run_id")
    kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null
    check_pass "$work/rank0.log" "$world ranks on $hosts hosts through Redis"
    [ "$left" = 0 ] || fail "$left keys of run $run_id left on the Redis store after the run"
    say "PASS: $world ranks on $hosts namespaces, gloo over TCP, Redis store in h0: verdict PASS in ${t} s ($rx bytes into h$((hosts - 1))), no key of the run left"
    ;;
  redis_gone)
    timeout_ms=5000
    start_redis
    ranks=$((world - 1))  # the last rank never comes: the others wait in the rendezvous
    start_env_ranks
    sleep 2
    for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null || fail "rank $i ended before the store went"; done
    t0=$(now)
    kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null
    wait_all 15
    t=$(elapsed "$t0" "$(now)")
    for i in "${!codes[@]}"; do
      [ "${codes[$i]}" = running ] && fail "rank $i still runs $t s after the Redis server was killed"
      [ "${codes[$i]}" = 3 ] || fail "rank $i ended with ${codes[$i]}, want 3 (infrastructure failed)"
      grep -q "$(addr 0):$redis_port (Redis store, run $run_id)" "$work/rank$i.log" || fail "rank $i does not name the Redis store"
    done
    no_orphans
    say "PASS: Redis server killed during the rendezvous: ${#codes[@]} ranks ended with exit 3 after $t s, naming the store: $(grep -o 'store at [^)]*)[^(]*' "$work/rank0.log" | head -1)"
    ;;
  nodes | launch)
    t0=$(now)
    start_launchers "$case"
    wait_all 300
    t=$(elapsed "$t0" "$(now)")
    check_pass "$work/node0.log" "one launcher per host"
    say "PASS: $hosts launchers (--nnodes $hosts), $per ranks each: verdict PASS in ${t} s ($rx bytes into h$((hosts - 1)))"
    ;;
  mpirun_gloo | mpirun_mpi)
    command -v mpirun >/dev/null 2>&1 || skip "no mpirun"
    backend=${case#mpirun_}
    # OpenMPI starts its daemon on a remote host through an rsh agent ("AGENT HOST COMMAND..."):
    # here the "host" is an address of one of the namespaces, and the agent runs the command there.
    agent=$work/netns-agent
    {
      echo '#!/bin/sh'
      echo 'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done'
      echo 'host=$1; shift'
      echo 'case $host in'
      for h in $(seq 0 $((hosts - 1))); do echo "  $(addr "$h")) ns=$tag-h$h ;;"; done
      echo '  *) echo "netns-agent: unknown host $host" >&2; exit 1 ;;'
      echo 'esac'
      echo 'exec ip netns exec "$ns" /bin/sh -c "$*"'
    } >"$agent"
    chmod +x "$agent"
    list=""
    for h in $(seq 0 $((hosts - 1))); do list+="${list:+,}$(addr "$h"):$per"; done
    t0=$(now)
    ip netns exec "$tag-h0" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np "$world" -H "$list" --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
      --mca oob_tcp_if_include 10.213.0.0/24 --mca btl_tcp_if_include 10.213.0.0/24 \
      --mca btl tcp,self --mca pml ob1 -x PARITY_COMM_TIMEOUT_MS=$timeout_ms \
      "$parity" run "$scenario" --as-rank --backend "$backend" >"$work/mpirun.log" 2>&1 &
    pids=($!)
    wait_all 300
    t=$(elapsed "$t0" "$(now)")
    check_pass "$work/mpirun.log" "mpirun across $hosts namespaces"
    say "PASS: mpirun -H $list (rsh agent: ip netns exec), backend $backend: verdict PASS in ${t} s ($rx bytes into h$((hosts - 1)))"
    ;;
  cut)
    timeout_ms=${PARITY_MULTIHOST_TIMEOUT_MS:-5000}
    bound=${PARITY_MULTIHOST_BOUND_S:-10}  # seconds after the collective timeout
    victim=$((hosts - 1))
    worst=0
    for try in $(seq "$tries"); do
      ip -n "$tag-h$victim" link set e0 up
      PARITY_COMM_TRACE=0 start_env_ranks --steps 100000
      wait_traced "$work/rank0.log"
      for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null || fail "try $try: rank $i ended before the cut"; done
      t0=$(now)
      ip -n "$tag-h$victim" link set e0 down
      wait_all $((timeout_ms / 1000 + bound))
      t=$(elapsed "$t0" "$(now)")
      for i in "${!codes[@]}"; do
        [ "${codes[$i]}" = running ] && fail "try $try: rank $i still runs $t s after the cut (timeout $timeout_ms ms + $bound s)"
        [ "${codes[$i]}" = 3 ] || fail "try $try: rank $i ended with ${codes[$i]}, want 3 (infrastructure failed)"
      done
      # Each rank names the member it waited for. Across sub-groups that may be a victim on a
      # host that is still up (rank 0 waits on rank 4, which waits on the cut rank 6), so the
      # cut host must be named by some rank, and rank 0 must name some missing rank.
      first=$((victim * per)) last=$((world - 1))
      cut_ranks=$([ "$per" -gt 1 ] && echo "ranks $first-$last" || echo "rank $first")
      grep -Eq "host [^ ]+ \($(addr $victim)\) is unreachable: $cut_ranks \(" "$work/rank0.log" ||
        fail "try $try: rank 0 does not name the cut host $(addr $victim) and its $cut_ranks"
      grep -Eq "missing rank [0-9]+ .*\(pid [0-9]+ on [^ ]+ \([0-9.]+\)" "$work/rank0.log" ||
        fail "try $try: rank 0 names no missing rank with its address"
      grep -Eqh "missing( rank [0-9]+ [^;]*;)* rank ($(seq -s '|' $((victim * per)) $((world - 1)))) (\(group rank [0-9]+\) )?\(pid [0-9]+ on [^ ]+ \($(addr $victim)\)" "$work"/rank*.log ||
        fail "try $try: no rank names a rank of the cut host $(addr $victim)"
      no_orphans
      say "try $try: cut $(addr $victim) (h$victim); every rank ended with exit 3 after $t s; rank 0: $(grep -o 'host [^ ]* ([0-9.]*) is unreachable: [^(]*' "$work/rank0.log" | head -1)"
      worst=$(awk -v a="$worst" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
    done
    say "PASS: $tries tries, collective timeout $((timeout_ms / 1000)) s, worst end after the cut ${worst} s"
    ;;
  host_dies)
    victim=$((hosts - 1))
    PARITY_COMM_TRACE=0 start_launchers nodes --steps 100000
    wait_traced "$work/node0.log"
    survivors=("${pids[@]:0:$victim}")
    t0=$(now)
    for p in $(ip netns pids "$tag-h$victim"); do kill -9 "$p"; done
    wait "${pids[$victim]}" 2>/dev/null  # reaped here: no "Killed" job notice
    pids=("${survivors[@]}")
    wait_all 20
    t=$(elapsed "$t0" "$(now)")
    for i in "${!codes[@]}"; do
      [ "${codes[$i]}" = running ] && fail "the launcher of h$i still runs $t s after h$victim died"
      [ "${codes[$i]}" = 3 ] || fail "the launcher of h$i ended with ${codes[$i]}, want 3 (infrastructure failed)"
    done
    grep -Eq "missing rank ($(seq -s '|' $((victim * per)) $((world - 1)))) \(pid [0-9]+ on [^ ]+ \($(addr $victim)\)" "$work/node0.log" ||
      fail "rank 0 does not name a rank of the dead host $(addr $victim)"
    no_orphans
    say "PASS: every process of h$victim killed; the other launchers ended with exit 3 after $t s (collective timeout $((timeout_ms / 1000)) s); $(grep -o 'missing rank [0-9]* ([^)]*)' "$work/node0.log" | head -1)"
    ;;
  *) say "FAIL: unknown case"; exit 2 ;;
esac
