#!/usr/bin/env python3
"""Thousands of real clients through a rendezvous on braid's store and on
torch's TCPStore (libuv), in the same run (issue 30, item 2).

Each client is a C++ thread with its own connection that does what
rendezvous does: connect, set its record, wait at a join barrier, get
another client's record, then a barrier. A barrier is each store's own: on
braid's one Arrive (the add and the wait in one round trip); TCPStore has no
such op, so there an add to a counter (the last sets a key) and a wait. braid's clients are bench/store_scale.cc's; torch's are
bench/python/tcpstore_clients.cpp (c10d::TCPStore, built here with torch's
cpp_extension). Client processes of --per-process threads each start, say
"ready", and begin together when the driver says go; the time is from the
first client's start to the last one's end. The server runs in its own
process and reports the CPU it spent and its memory (peak over the start,
per client) and its descriptors before and after (a leak shows).

    .venv/bin/python bench/store_scale.py                        # 1k, 4k, 10k; 2 rounds
    .venv/bin/python bench/store_scale.py --clients 1000 --rounds 1
    .venv/bin/python bench/store_scale.py --floor   # and clients that only connect

torch's client looks up its socket's host name (a reverse DNS query) on
every connection. Where DNS drops bursts, as this VM's resolver does, each
costs 5 s. As root the run goes into a mount namespace whose
/etc/resolv.conf names no server, so such lookups fail at once, as they
answer at once on a cluster with working DNS (--keep-dns: do not).

As root it also runs in a network namespace of its own whose accept queues
may hold every client (net.core.somaxconn and tcp_max_syn_backlog 65535,
the host's left alone): at the host's 4096, thousands of connects arriving
at once overflow the queue and wait out SYN retransmits (1 s, then 3 s),
which then set either server's time.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_ext(build):
    from torch.utils import cpp_extension
    os.makedirs(build, exist_ok=True)
    return cpp_extension.load(name="tcpstore_clients", sources=[os.path.join(HERE, "python", "tcpstore_clients.cpp")],
                              extra_cflags=["-O2"], build_directory=build, verbose=False)


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def torch_server(clients):
    """torch's store in this process until bench/shutdown is set; then what it cost."""
    import datetime
    from torch.distributed import TCPStore
    base_rss, cpu_start = status_kb("VmRSS:"), cpu_seconds()
    store = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                     timeout=datetime.timedelta(hours=2))
    fds_before = fd_count()  # the server's own and this process's client
    print(f"port {store.port}", flush=True)
    store.get("bench/shutdown")
    deadline = time.time() + 10
    while fd_count() > fds_before and time.time() < deadline:
        time.sleep(0.05)
    print(f"server cpu_s={cpu_seconds() - cpu_start:.3f} rss_kb={status_kb('VmRSS:')} "
          f"peak_rss_kb={status_kb('VmHWM:')} base_rss_kb={base_rss} fds_before={fds_before} "
          f"fds_after={fd_count()}", flush=True)


def torch_clients(port, first, n, total, go, build):
    ext = load_ext(build)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    start = time.time_ns()
    ok, error = ext.run("127.0.0.1", port, first, n, total, 120.0)
    print(f"ok {ok} {start} {time.time_ns()}", flush=True)
    if error:
        print(f"store_scale: {error}", file=sys.stderr)
    sys.exit(0 if ok == n else 1)


def parse_kv(line):
    return {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}


def run_side(side, total, per, args):
    """One rendezvous of `total` clients: (seconds, clients ok, the server's report).
    Side "floor": braid's clients only connect and hang up."""
    py = sys.executable
    if side in ("braid", "floor"):
        server = subprocess.Popen([args.bin, "--serve", f"--clients={total}"], stdout=subprocess.PIPE, text=True)
    else:
        server = subprocess.Popen([py, __file__, "--torch-server", str(total)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline().split()[1])
    go = tempfile.mktemp(prefix="store_scale_go_")
    procs = []
    for first in range(0, total, per):
        n = min(per, total - first)
        if side in ("braid", "floor"):
            cmd = [args.bin, f"--connect=127.0.0.1:{port}", f"--first={first}", f"--clients={n}", f"--total={total}",
                   f"--go={go}"] + (["--connect-only"] if side == "floor" else [])
        else:
            cmd = [py, __file__, "--torch-clients", str(port), str(first), str(n), str(total), go, args.build]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    open(go, "w").close()
    ok, starts, ends = 0, [], []
    for p in procs:
        fields = p.stdout.readline().split()
        p.wait()
        if len(fields) == 4 and fields[0] == "ok":
            ok += int(fields[1])
            starts.append(int(fields[2]))
            ends.append(int(fields[3]))
    os.unlink(go)
    if side in ("braid", "floor"):
        subprocess.run([args.bin, f"--connect=127.0.0.1:{port}", "--stop"], check=True)
    else:
        from torch.distributed import TCPStore
        TCPStore("127.0.0.1", port, is_master=False).set("bench/shutdown", "1")
    report = parse_kv(server.stdout.readline())
    server.wait()
    seconds = (max(ends) - min(starts)) / 1e9 if starts else float("nan")
    return seconds, ok, report


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-server":
        return torch_server(int(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-clients":
        a = sys.argv[2:]
        return torch_clients(int(a[0]), int(a[1]), int(a[2]), int(a[3]), a[4], a[5])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1000,4000,10000")
    parser.add_argument("--per-process", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin", "bench", "store_scale"))
    parser.add_argument("--build", default=os.path.join(ROOT, "bench", "out", "tcpstore_ext"))
    parser.add_argument("--keep-dns", action="store_true")
    parser.add_argument("--floor", action="store_true",
                        help="also time braid's clients only connecting and hanging up (the floor of threads and "
                             "connections), between the two sides")
    args = parser.parse_args()
    if not args.keep_dns and os.geteuid() == 0 and os.environ.get("STORE_SCALE_NO_DNS") != "1":
        resolv = os.path.join(tempfile.mkdtemp(prefix="store_scale_"), "resolv.conf")
        with open(resolv, "w") as f:
            f.write("# bench/store_scale.py: no name server here\n")
        os.environ["STORE_SCALE_NO_DNS"] = "1"
        script = ('mount --bind "$0" /etc/resolv.conf && ip link set lo up && '
                  'sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 && exec "$@"')
        os.execvp("unshare", ["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script, resolv,
                              sys.executable] + sys.argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a descriptor per client, in the server
    load_ext(args.build)  # built once, before anything is timed
    dns = ("no name server, accept queues of 65535 (private mount and network namespaces)"
           if os.environ.get("STORE_SCALE_NO_DNS") == "1" else "the host's")
    print(f"# bench/store_scale.py: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
          f"RLIMIT_NOFILE {hard}, {args.per_process} client threads a process, DNS: {dns}")
    floor_head = (" connect floor s | floor/torch |", "---:|---:|") if args.floor else ("", "")
    print("| clients | round | braid s | torch s | braid/torch | lost (braid, torch) | server CPU us/client "
          "(braid, torch) | server KiB/client (braid, torch) | fds leaked (braid, torch) |" + floor_head[0])
    print("|---:|---:|---:|---:|---:|---|---|---|---|" + floor_head[1])
    for total in [int(c) for c in args.clients.split(",")]:
        for r in range(args.rounds):
            sides = ["braid", "torch"] if r % 2 == 0 else ["torch", "braid"]
            if args.floor:
                sides.insert(1, "floor")
            got = {side: run_side(side, total, args.per_process, args) for side in sides}
            (bs, bok, br), (ts, tok, tr) = got["braid"], got["torch"]

            def per_client(rep, key):
                return (rep[key] - rep["base_rss_kb"]) / total if key != "cpu_s" else rep["cpu_s"] * 1e6 / total

            print(f"| {total} | {r + 1} | {bs:.2f} | {ts:.2f} | {bs / ts:.2f} | {total - bok}, {total - tok} | "
                  f"{per_client(br, 'cpu_s'):.0f}, {per_client(tr, 'cpu_s'):.0f} | "
                  f"{per_client(br, 'peak_rss_kb'):.1f}, {per_client(tr, 'peak_rss_kb'):.1f} | "
                  f"{br['fds_after'] - br['fds_before']:.0f}, {tr['fds_after'] - tr['fds_before']:.0f} |" +
                  (f" {got['floor'][0]:.2f} | {got['floor'][0] / ts:.2f} |" if args.floor else ""), flush=True)


if __name__ == "__main__":
    main()
