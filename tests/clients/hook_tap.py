#!/usr/bin/env python3
"""A Claude Code hook command that records what Claude Code hands its hooks, then (optionally)
runs the real hook with the same stdin and passes its answer through.

  hook_tap.py --dir DIR [--watch-ms N] [-- REAL HOOK COMMAND ...]

Appends one JSON line per call to DIR/hooks.jsonl:
  {seq, ts_start, ts_end, event (the parsed stdin), raw_stdin, argv, env (CLAUDE*/MNEME* vars),
   transcript: {path, exists, bytes, lines, types: [type of each line], last: [last 3 entries
   (trimmed)], snapshot: file name of a copy taken at the moment the hook started},
   answer (the real hook's stdout), stderr, rc, real_ms}
and copies the transcript as it was to DIR/transcript-<seq>-<event>.jsonl.

With --watch-ms N a detached watcher keeps polling the transcript (every 5 ms, for N ms from the
hook's start) and logs each change (line count, user/assistant sequence) to DIR/watch.jsonl: this
shows when a turn actually lands in the transcript relative to the hook.

Python 3 standard library only; exits with the real hook's exit code (0 without one).
"""

import json
import os
import shutil
import subprocess
import sys
import time


def main():
    argv = sys.argv[1:]
    real = []
    if "--" in argv:
        i = argv.index("--")
        argv, real = argv[:i], argv[i + 1:]
    out_dir = argv[argv.index("--dir") + 1] if "--dir" in argv else os.environ.get("HOOK_TAP_DIR", ".")
    if "--watcher" in argv:  # internal: the detached transcript watcher
        return watch(out_dir, argv[argv.index("--watcher") + 1], argv[argv.index("--watcher") + 2],
                     float(argv[argv.index("--watcher") + 3]))
    watch_ms = int(argv[argv.index("--watch-ms") + 1]) if "--watch-ms" in argv else 0
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    raw = sys.stdin.buffer.read()
    try:
        event = json.loads(raw)
    except ValueError:
        event = None
    name = (event or {}).get("hook_event_name", "unknown") if isinstance(event, dict) else "unknown"
    seq_path = os.path.join(out_dir, ".seq")
    # A crude sequence number (hooks of one event may run concurrently; good enough for tests).
    try:
        with open(seq_path, "a+") as f:
            f.seek(0)
            seq = len(f.read()) + 1
            f.write(".")
    except OSError:
        seq = 0
    tr = {"path": None, "exists": False}
    tp = (event or {}).get("transcript_path") if isinstance(event, dict) else None
    if tp:
        tr["path"] = tp
        tr["exists"] = os.path.exists(tp)
        if tr["exists"]:
            snap = f"transcript-{seq:03d}-{name}.jsonl"
            try:
                shutil.copyfile(tp, os.path.join(out_dir, snap))
                with open(tp, "rb") as f:
                    data = f.read()
                lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
                entries = []
                for ln in lines:
                    try:
                        entries.append(json.loads(ln))
                    except ValueError:
                        entries.append({"type": "<unparsable>"})
                tr.update(bytes=len(data), lines=len(lines), snapshot=snap,
                          types=[e.get("type") for e in entries],
                          last=[_trim(e) for e in entries[-3:]])
            except OSError as e:
                tr["error"] = str(e)
    answer, err, rc = "", "", 0
    t1 = time.time()
    if real:
        try:
            p = subprocess.run(real, input=raw, capture_output=True)
            answer, err, rc = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), p.returncode
        except OSError as e:
            err, rc = str(e), 127
    t2 = time.time()
    rec = {
        "seq": seq, "ts_start": round(t0, 3), "ts_end": round(t2, 3), "real_ms": round((t2 - t1) * 1000),
        "hook_event_name": name, "event": event, "raw_stdin": None if event is not None else raw.decode("utf-8", "replace"),
        "argv": sys.argv, "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("CLAUDE", "MNEME")) and "TOKEN" not in k and "KEY" not in k},
        "transcript": tr, "answer": answer, "stderr": err, "rc": rc,
    }
    with open(os.path.join(out_dir, "hooks.jsonl"), "a") as f:
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if watch_ms and tp:
        # Follow the transcript after this hook returned, to see when the turn lands in it.
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--dir", out_dir, "--watcher",
                          f"{seq:03d}-{name}", tp, str(t0 + watch_ms / 1000)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    sys.stdout.write(answer)
    sys.stderr.write(err)
    sys.exit(rc)


def _roles(path):
    """(line count, [user/assistant types in order]) of a transcript right now."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None, None
    roles = []
    for ln in lines:
        try:
            t = json.loads(ln).get("type")
        except ValueError:
            continue
        if t in ("user", "assistant"):
            roles.append(t)
    return len(lines), roles


def watch(out_dir, label, path, until):
    """Polls the transcript every 5 ms until `until`; logs each change to watch.jsonl."""
    t0 = time.time()
    last = None
    with open(os.path.join(out_dir, "watch.jsonl"), "a") as f:
        while time.time() < until:
            n, roles = _roles(path)
            if (n, roles) != last:
                f.write(json.dumps({"hook": label, "ts": round(time.time(), 3), "lines": n, "roles": roles}) + "\n")
                f.flush()
                last = (n, roles)
            time.sleep(0.005)
    return 0


def _trim(e):
    """An entry's shape, with long strings cut, for a quick look."""
    def cut(v, depth=0):
        if isinstance(v, str):
            return v if len(v) <= 300 else v[:300] + f"...<{len(v)} chars>"
        if isinstance(v, list):
            return [cut(x, depth + 1) for x in v[:10]]
        if isinstance(v, dict):
            return {k: cut(x, depth + 1) for k, x in v.items()}
        return v
    return cut(e)


if __name__ == "__main__":
    main()
