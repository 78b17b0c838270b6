"""Runs examples/char_transformer as a user does and checks what it promises.

usage: char_transformer_test.py BINARY CORPUS CASE [STEPS]

CASE is one of:
  errors  a missing, empty, too short corpus or a prompt outside it: clear errors
          naming the path
  train   a short run on the device KILN_DEVICE names (cpu or vulkan, fixed
          seeds): the final loss (mean of the last 20 steps) below 0.8 x log(vocab)
          and below the initial loss, exactly one trace of the training step and
          one of the sampler, a sample of the requested length made of corpus
          characters only
"""

import json
import math
import os
import subprocess
import sys
import tempfile

BINARY = os.path.abspath(sys.argv[1])
CORPUS = os.path.abspath(sys.argv[2])
CASE = sys.argv[3]
STEPS = int(sys.argv[4]) if len(sys.argv) > 4 else 200
SAMPLE_LENGTH = 120


def run(args, cwd, expect_ok=True):
    p = subprocess.run([BINARY] + args, cwd=cwd, capture_output=True, text=True,
                       timeout=900)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAIL: {args} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    if not expect_ok and p.returncode == 0:
        sys.exit(f"FAIL: {args} succeeded but should have failed\n{p.stdout}")
    return p


def expect_error(args, cwd, *fragments):
    p = run(args, cwd, expect_ok=False)
    for f in fragments:
        if f not in p.stderr:
            sys.exit(f"FAIL: {args}: stderr lacks {f!r}:\n{p.stderr}")
    print(f"ok: {' '.join(args)} -> {p.stderr.strip().splitlines()[-1]}")


def case_errors(tmp):
    missing = os.path.join(tmp, "nowhere.txt")
    expect_error(["--corpus", missing, "--steps", "1"], tmp, missing, "no such file")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    expect_error(["--corpus", empty, "--steps", "1"], tmp, empty, "is empty")
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("abc")
    expect_error(["--corpus", short, "--steps", "1"], tmp, short, "too short", "context")
    expect_error(["--corpus", tmp, "--steps", "1"], tmp, tmp, "directory")
    expect_error(["--corpus", CORPUS, "--steps", "1", "--prompt", "#"], tmp,
                 "--prompt", "not in the corpus")


def case_train(tmp):
    out = os.path.join(tmp, "run.json")
    p = run(["--corpus", CORPUS, "--steps", str(STEPS), "--seed", "0",
             "--sample-length", str(SAMPLE_LENGTH), "--log-every", "50", "--json", out], tmp)
    print(p.stdout)
    r = json.load(open(out))
    device = os.environ.get("KILN_DEVICE", "cpu")
    if not r["device"].startswith(device):
        sys.exit(f"FAIL: ran on {r['device']}, expected {device}")
    bound = 0.8 * math.log(r["vocab_size"])
    if not (r["final_loss"] < bound and r["final_loss"] < r["initial_loss"]):
        sys.exit(f"FAIL: final loss {r['final_loss']} (initial {r['initial_loss']}) "
                 f"not below 0.8 x log(vocab) = {bound}")
    if r["train_traces"] != 1 or r["sample_traces"] != 1:
        sys.exit(f"FAIL: traces train_step {r['train_traces']}, sample {r['sample_traces']};"
                 " expected 1 and 1")
    if "traces: train_step 1, sample 1" not in p.stdout:
        sys.exit("FAIL: the trace counts are not printed")
    sample = r["sample"]
    allowed = set(open(CORPUS, "rb").read().decode("latin-1"))
    if len(sample) != SAMPLE_LENGTH:
        sys.exit(f"FAIL: sample has {len(sample)} characters, asked for {SAMPLE_LENGTH}")
    if not set(sample) <= allowed:
        sys.exit(f"FAIL: sample has characters outside the corpus: {set(sample) - allowed}")
    if sample not in p.stdout:
        sys.exit("FAIL: the sample is not printed")
    print(f"ok: {r['device']}: loss {r['initial_loss']:.4f} -> {r['final_loss']:.4f} "
          f"(bound {bound:.4f}), {r['median_step_ms']:.1f} ms/step, one trace each, "
          f"{len(sample)}-character sample")


with tempfile.TemporaryDirectory() as tmp:
    {"errors": case_errors, "train": case_train}[CASE](tmp)
