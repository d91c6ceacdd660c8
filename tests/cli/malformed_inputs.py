# malformed_inputs.py PARITY SOURCE_DIR [MUTATIONS]: bad input never crashes Parity and is named when refused. Seeded
# mutations (lines dropped, doubled or cut, numbers, strings and keys swapped for odd ones, stray bytes; JSON values
# deleted or retyped; HDF5 datasets deleted, reshaped, retyped, emptied or made groups) of three inputs a user hands
# it: a case file (`parity list`, `parity run --cpu`), a results document with a history store and baselines
# (`parity history append`, `history check`, `report`, `gate`), and a `parity compare` candidate (HDF5; only where
# this Python has h5py). Every run must exit 0, 1 or 2, print no "terminate called" nor "harness error" (an exception
# that is not bad input), and an exit 2 must name the file, directory or case it refused. MUTATIONS a sweep
# (default 12); the seed is fixed, so a failure replays.
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

PARITY, SRC = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 12
rng = random.Random(20261130)
tmp = tempfile.mkdtemp(prefix="parity-malformed-")
failures = []


def run(args, names):
    """Runs parity with args; records a failure unless it exits 0, 1 or 2 cleanly, naming one of `names` on exit 2."""
    try:
        p = subprocess.run([PARITY, *args], capture_output=True, text=True, errors="replace", timeout=120, cwd=SRC)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, out = "timeout", ""
    bad = rc not in (0, 1, 2) or "terminate called" in out or "harness error" in out
    if rc == 2 and not any(n in out for n in names):
        bad = True
    if bad:
        kept = os.path.join(tmp, f"failure{len(failures)}")
        os.makedirs(kept)
        for n in names:
            if os.path.exists(n) and n.startswith(tmp):
                (shutil.copytree if os.path.isdir(n) else shutil.copy)(n, os.path.join(kept, os.path.basename(n)))
        failures.append(f"parity {' '.join(args)}: exit {rc} (inputs kept in {kept})\n{out[-1500:]}")
    return rc


ODD_NUMBERS = ["0", "-1", "1e309", "-1e309", "nan", "inf", "9223372036854775807", "18446744073709551616", "3.5",
               "1e-320", "true", '"7"', "[]", "{}"]
ODD_STRINGS = ["", " ", "bitwise", "ulp<=-1", "ulp<=99999999999999999999", "allclose(atol=nan, rtol=1)",
               "naive_relative(k=-2, floor=1)", "naive_relative(k=2,", "bitwise(max_fraction=2)",
               "ulp<=3; nan=expected; nan=expected", "fp8", "cuda:v1", "../../etc/passwd", "hc/nope.h5", "x" * 3000,
               "hc_pre/../hc_post", "perf"]
ODD_KEYS = ["id", "dims", "seed", "dtype", "golden", "suites", "variants", "tokens", "hc", "hidden", "policy", "bogus",
            "constants", "deterministic", "reference"]


def mutate_text(text):
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        i, op = rng.randrange(len(lines)), rng.randrange(7)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 2 and (nums := list(re.finditer(r"(?<![\w.])-?\d+(\.\d+)?(?![\w.])", lines[i]))):
            m = rng.choice(nums)
            lines[i] = lines[i][:m.start()] + rng.choice(ODD_NUMBERS) + lines[i][m.end():]
        elif op == 3 and (strs := list(re.finditer(r'"[^"]*"', lines[i]))):
            m = rng.choice(strs)
            lines[i] = lines[i][:m.start()] + json.dumps(rng.choice(ODD_STRINGS)) + lines[i][m.end():]
        elif op == 4:
            lines[i] = re.sub(r"^(\s*)(\w+)", lambda m: m.group(1) + rng.choice(ODD_KEYS), lines[i])
        elif op == 5:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        else:
            j = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:j] + bytes(rng.randrange(256) for _ in range(3)).decode("latin-1") + lines[i][j:]
    return "\n".join(lines)


def case_files():
    """Small cases of every hc op (seeded and golden), renamed so that they add to cases/ rather than clash."""
    text = open(os.path.join(SRC, "cases", "hc.toml")).read()
    head = text[: text.index("[[case]]")]
    wanted = ("hc_pre/hf_tiny_bf16", "hc_pre/odd_tokens", "hc_post/odd_tokens", "hc_head/odd_tokens")
    blocks = [b for b in re.split(r"(?=^\[\[case\]\])", text, flags=re.M) if any(f'id = "{w}"' in b for w in wanted)]
    base = head + "".join(blocks).replace('/odd_tokens"', '/m_odd"').replace('/hf_tiny_bf16"', '/m_hf"')
    for n in range(N):
        d = os.path.join(tmp, f"cases{n}")
        os.makedirs(d)
        mutated = mutate_text(base)
        with open(os.path.join(d, "m.toml"), "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(mutated)
        names = [d, "no case '"]
        if run(["list", "--suite", "all", "--cases-dir", d], names) == 0:
            for case_id in re.findall(r'^\s*id\s*=\s*"([^"]+)"', mutated, re.M)[:2]:
                run(["run", "--cpu", "--no-color", "--case", case_id, "--cases-dir", d], names + [case_id])


ODD_VALUES = [None, -1, 0, 1e308, float("nan"), "x", "", [], {}, True, 2**64, [1, "a"], {"a": 1}]


def mutate_json(doc):
    for _ in range(rng.randint(1, 3)):
        paths, stack = [], [((), doc)]
        while stack:
            path, node = stack.pop()
            if path:
                paths.append(path)
            children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            stack.extend((path + (k,), v) for k, v in children)
        path = rng.choice(paths)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if rng.randrange(3) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(ODD_VALUES)
    return doc


def documents():
    results = os.path.join(tmp, "results.json")
    if run(["run", "--cpu", "--no-color", "--case", "hc_post/odd_tokens", "--perf", "--time-cap", "0.2", "--json",
            results], [results]) != 0:
        failures.append(f"no results document to mutate: parity run --case hc_post/odd_tokens did not pass")
        return
    good = json.load(open(results))
    good_baseline = json.load(open(os.path.join(SRC, "baselines", "hc_post.json")))
    for n in range(N):
        d = os.path.join(tmp, f"docs{n}")
        os.makedirs(os.path.join(d, "baselines"))
        doc = os.path.join(d, "results.json")
        json.dump(mutate_json(json.loads(json.dumps(good))), open(doc, "w"))
        history = os.path.join(d, "history")
        run(["history", "append", results, "--dir", history], [history])  # a good record, then the mutated one
        run(["history", "append", doc, "--dir", history], [doc, history])
        run(["history", "check", "--dir", history], [history])
        run(["report", "--results", doc, "--history", history, "--out", os.path.join(d, "r.html")], [doc, history])
        baseline = json.loads(json.dumps(good_baseline))
        json.dump(mutate_json(baseline) if n % 2 else baseline, open(os.path.join(d, "baselines", "hc_post.json"), "w"))
        run(["gate", "--cpu", "--no-color", "--case", "hc_post/odd_tokens", "--baseline-dir",
             os.path.join(d, "baselines")], [os.path.join(d, "baselines")])


def candidates():
    try:
        import h5py
        import numpy as np
    except ImportError:
        print(f"SKIP (candidates): {sys.executable} has no h5py")
        return
    base = os.path.join(tmp, "candidate.h5")
    with h5py.File(os.path.join(SRC, "golden", "hc", "hc_pre_tiny_bf16.h5"), "r") as g, h5py.File(base, "w") as f:
        g.copy("outputs", f)
        g.copy("grads", f)
        for stage in ("mixes", "pre"):
            g.copy(f"stages/{stage}", f["outputs"], name=stage)

    def mutate(f):
        names = []
        f.visititems(lambda name, o: names.append(name) if isinstance(o, h5py.Dataset) else None)
        name = rng.choice(names)
        data, attrs = f[name][()], dict(f[name].attrs)
        del f[name]
        op = rng.randrange(9)
        if op == 0:  # deleted
            return
        if op == 1:
            f.create_group(name)
            return
        if op == 2:
            data = data.reshape(-1)
        elif op == 3:
            data = data[..., :-1]
        elif op == 4:
            data = data.astype(np.float64)
        elif op == 5:
            data = np.zeros((0,) + data.shape[1:], data.dtype)
        elif op == 6:
            data = np.array([b"ab", b"c"])
        ds = f.create_dataset(name, data=data)
        if op != 7:  # 7: no dtype attribute
            for k, v in attrs.items():
                ds.attrs[k] = v
        if op in (6, 8):  # 8: the data unchanged, its dtype attribute odd
            ds.attrs["dtype"] = rng.choice(["", "fp8", "int64", "fp16", "bf16x"])

    for n in range(N):
        path = os.path.join(tmp, f"candidate{n}.h5")
        shutil.copy(base, path)
        with h5py.File(path, "a") as f:
            mutate(f)
        run(["compare", "--case", "hc_pre/hf_tiny_bf16", "--candidate", path, "--cpu", "--no-color"], [path])


case_files()
documents()
candidates()
if failures:
    print(f"{len(failures)} runs misbehaved:\n\n" + "\n\n".join(failures))
    sys.exit(1)
shutil.rmtree(tmp)
print(f"ok: every run on {N} mutations of each input exited 0, 1 or 2, and named what it refused")
