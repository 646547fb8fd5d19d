#!/usr/bin/env python3
"""The docs test: every command in README.md and docs/*.md runs, and every sample output is fresh.

    doc_test.py setup --tide BUILD/tide --work DIR               prepare what the runs share (ctest
                                                                 fixture docs.setup; else done once)
    doc_test.py list FILE.md ...                                 print the commands and samples found
    doc_test.py run   --tide BUILD/tide --work DIR FILE.md ...   exit 1 when a command fails or a
                                                                 sample output is stale
    doc_test.py regen --tide BUILD/tide --work DIR FILE.md ...   rewrite the sample outputs in
                                                                 the files (scripts/regen_doc_samples.sh)

What runs (docs/README.md-level rules; the "Tested docs" section of docs/reliability.md):
  * every command of a ```sh block, in order, one bash session per file, in a scratch directory
    holding the default corpus, small text files and a run.json (so `data.dir=data/mine`,
    `--input book.txt`, `--config run.json` work), with `tide` and `build/tide` running the build
    under test. `tide train` gets a small model appended (model shape, sequence length,
    micro-batch, validation set; train_steps=4 unless the command sets train_steps), so a doc
    may show any size; the step counts it sets (train_steps, checkpoint/eval/log intervals, the
    N of a model_step<N>.ckpt path) are divided by STEP_SCALE (100), and a command without an
    out_dir may replace the previous one's runs/default (out_dir_overwrite=true). The
    benchmarks in build/bench run at the small sizes of SMALL_BENCH. `...` (the reader's other keys) and `[--optional args]` are dropped.
  * a block whose first line is `$ COMMAND` is a sample: COMMAND runs as printed (no small size)
    and the rest of the block must be its output. A line `...` in it keeps only the lines above
    it (the output's first lines) and below it (its last lines). `<!-- docs-test: output of:
    COMMAND -->` before a block makes the block COMMAND's output the same way. Throughput and
    ETA figures (`123 tok/s`, `ETA 4s`) are not compared.
  * `<!-- docs-test: skip: REASON -->` before a block skips its commands;
    `<!-- docs-test: skip PREFIX: REASON -->` only those that start with PREFIX.
  * a command (tide, build/..., mpirun, scripts/...) in a block with no language tag is an
    error: tag the block sh (or text) or skip it, so no command goes untested by accident.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
COMMANDISH = re.compile(r"^(tide |build/|\./build/|mpirun |bash scripts/|scripts/|python3 tools/|ctest |cmake |ninja )")
SHELL_TAGS = {"sh", "bash", "shell"}
# The small model `tide train` runs at (4 layers: pipeline.stages=4 and zb-v's 2 x 2 chunks
# divide it; 2 heads: tensor_parallel.size=2 divides them; seq 32: sequence parallel divides it).
SMALL_TRAIN = ["model.n_layer=4", "model.n_head=2", "model.n_embd=32", "seq_len=32",
               "train_micro_batch_size_per_gpu=2", "eval.sequences=4", "threads=1",
               "log.progress=false"]
# Step counts in `tide train` commands are divided by this (README's 600 steps with a checkpoint
# every 100, resumed from model_step500.ckpt: 6 steps, every 1, from model_step5.ckpt).
STEP_SCALE = 100
# The benchmarks' small sizes: these flags replace the command's own (a None value: a flag).
SMALL_BENCH = {
    "bench_gpt_cpu": [("--L", "1"), ("--H", "2"), ("--C", "64"), ("--V", "256"), ("--T", "32"),
                      ("--B", "2"), ("--steps", "1"), ("--warmup", "0"), ("--no-sgemm", None)],
    "bench_adam": [("--max-params", "1e6"), ("--reps", "1")],
    "bench_dp": [("--steps", "1"), ("--zero-stages", "0")],
    "bench_allreduce": [("--max-bytes", "65536"), ("--seconds", "0.01")],
}
VOLATILE = [(re.compile(r"\b\d+(\.\d+)? tok/s"), "<n> tok/s"),
            (re.compile(r"\bETA \S+"), "ETA <t>"),
            (re.compile(r"\b(steps? in )\d+(m\d+)?s\b"), r"\1<t>")]


@dataclass
class Command:
    line: int          # 1-based line in the file
    text: str          # as it runs (continuations joined, `...` and [optional] args dropped)
    skip: str = ""     # the reason, when skipped


@dataclass
class Sample:
    line: int                      # the block's first content line (1-based)
    end: int                       # the closing fence's line (1-based)
    command: str
    prompt_lines: list             # the `$ ...` lines kept as they are
    head: list = field(default_factory=list)
    tail: list = field(default_factory=list)
    elided: bool = False


def normalize(line):
    for rx, rep in VOLATILE:
        line = rx.sub(rep, line)
    return line.rstrip()


def clean_command(text):
    text = re.sub(r"\s\[-[^\]]*\]", "", text)            # [--optional args] of a synopsis
    text = re.sub(r"(?<=\s)\.\.\.(?=\s|$)", "", text)      # `...`: the reader's other keys
    return text.strip()


def join_continuations(lines, start):
    """Lines from `start` joined over trailing backslashes; returns (text, next index)."""
    parts, i = [], start
    while i < len(lines):
        ln = lines[i].rstrip()
        if ln.endswith("\\"):
            parts.append(ln[:-1].strip())
            i += 1
            continue
        parts.append(ln.strip())
        return " ".join(parts), i + 1
    return " ".join(parts), i


def parse(path):
    """Returns (commands, samples, errors) of one markdown file."""
    lines = path.read_text().split("\n")
    commands, samples, errors = [], [], []
    markers, i = [], 0
    while i < len(lines):
        m = MARKER.match(lines[i].strip())
        if m:
            markers.append((i + 1, m.group(1)))
            i += 1
            continue
        f = FENCE.match(lines[i].strip())
        if not f:
            if lines[i].strip():
                markers = []
            i += 1
            continue
        tag, begin = f.group(1), i + 1
        end = begin
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        body = lines[begin:end]
        skip_all, skip_prefixes, output_of = "", [], None
        for mline, text in markers:
            s = re.match(r"^skip(?:\s+(.+?))?:\s*(.+)$", text)
            o = re.match(r"^output of:\s*(.+)$", text)
            if s and s.group(1):
                skip_prefixes.append((s.group(1), s.group(2)))
            elif s:
                skip_all = s.group(2)
            elif o:
                output_of = o.group(1)
            else:
                errors.append(f"{path}:{mline}: unknown docs-test marker '{text}'; use 'skip: "
                              "REASON', 'skip PREFIX: REASON' or 'output of: COMMAND'")
        markers = []
        first = body[0].strip() if body else ""
        if output_of is not None or first.startswith("$ "):
            if output_of is not None:
                command, rest, prompt = output_of, body, []
            else:
                command, k = join_continuations([b.strip()[2:] if j == 0 else b
                                                 for j, b in enumerate(body)], 0)
                rest, prompt = body[k:], body[:k]
            sm = Sample(line=begin + 1, end=end + 1, command=command, prompt_lines=prompt)
            dots = [j for j, r in enumerate(rest) if r.strip() == "..."]
            if len(dots) > 1:
                errors.append(f"{path}:{begin + 1}: a sample may elide once ('...'), not "
                              f"{len(dots)} times")
            elif dots:
                sm.elided, sm.head, sm.tail = True, rest[:dots[0]], rest[dots[0] + 1:]
            else:
                sm.head = rest
            if skip_all:
                commands.append(Command(begin + 1, command, skip_all))
            else:
                samples.append(sm)
        elif tag in SHELL_TAGS:
            j = 0
            while j < len(body):
                if not body[j].strip() or body[j].strip().startswith("#"):
                    j += 1
                    continue
                text, nxt = join_continuations(body, j)
                cmd = Command(begin + j + 1, clean_command(text))
                if skip_all:
                    cmd.skip = skip_all
                for prefix, reason in skip_prefixes:
                    if cmd.text.startswith(prefix):
                        cmd.skip = reason
                commands.append(cmd)
                j = nxt
        elif tag == "" and not skip_all:
            for j, b in enumerate(body):
                if COMMANDISH.match(b.strip()):
                    errors.append(f"{path}:{begin + j + 1}: a command in a block not tagged sh: "
                                  "tag the block ```sh so the docs test runs it, or put "
                                  "<!-- docs-test: skip: REASON --> before it")
                    break
        i = end + 1
    return commands, samples, errors


def make_sandbox(work, tide, source, shared):
    """The scratch directory a file's commands run in."""
    if work.exists():
        shutil.rmtree(work)
    (work / "bin").mkdir(parents=True)
    (work / "build").mkdir()
    wrapper = f"""#!/usr/bin/env bash
# The docs test's `tide`: the build under test; `tide train` at a small size unless
# DOCS_TEST_AS_PRINTED=1 (sample outputs). Written by tests/docs/doc_test.py.
real={tide}
if [ "${{DOCS_TEST_AS_PRINTED:-0}}" != 1 ] && [ "${{1:-}}" = train ]; then
  extra=() args=()
  for a in "$@"; do
    case "$a" in -*|model.preset=*) exec "$real" "$@" ;; esac
    # Step counts / {STEP_SCALE}, at least 1 (0 stays 0), and a model_step<N>.ckpt with them.
    if [[ $a =~ ^(train_steps|checkpoint\.interval|eval\.interval|log\.interval|steps_per_print)=([0-9]+)$ ]]; then
      v=${{BASH_REMATCH[2]}}
      [ "$v" -gt 0 ] && v=$(( v / {STEP_SCALE} )) && [ "$v" -lt 1 ] && v=1
      a="${{BASH_REMATCH[1]}}=$v"
    elif [[ $a =~ ^(.*model_step)([0-9]+)(\.ckpt.*)$ ]]; then
      a="${{BASH_REMATCH[1]}}$(( BASH_REMATCH[2] / {STEP_SCALE} ))${{BASH_REMATCH[3]}}"
    fi
    args+=("$a")
  done
  set -- "${{args[@]}}"
  case " $* " in *" train_steps="*) ;; *) extra+=(train_steps=4) ;; esac
  # The docs' alternatives all train into runs/default: each replaces the one before.
  case " $* " in *" out_dir="*|*" checkpoint.resume="*) ;; *) extra+=(out_dir_overwrite=true) ;; esac
  exec "$real" "$@" {' '.join(SMALL_TRAIN)} "${{extra[@]}}"
fi
exec "$real" "$@"
"""
    for p in (work / "bin" / "tide", work / "build" / "tide"):
        p.write_text(wrapper)
        p.chmod(0o755)
    build = Path(tide).parent
    if (build / "tests").exists():
        (work / "build" / "tests").symlink_to(build / "tests")
    (work / "build" / "bench").mkdir()
    for prog in sorted((build / "bench").glob("bench_*")) if (build / "bench").exists() else []:
        if not (prog.is_file() and os.access(prog, os.X_OK)):
            continue
        dest = work / "build" / "bench" / prog.name
        small = SMALL_BENCH.get(prog.name)
        if small is None:
            dest.symlink_to(prog)
            continue
        valued = " ".join(f for f, v in small if v is not None)
        flags = " ".join(f for f, v in small if v is None)
        append = " ".join(f if v is None else f"{f} {v}" for f, v in small)
        dest.write_text(f"""#!/usr/bin/env bash
# The docs test's {prog.name}: at a small size ({append} replace the command's own).
args=()
while [ $# -gt 0 ]; do
  case " {valued} " in *" $1 "*) shift 2; continue ;; esac
  case " {flags} " in *" $1 "*) shift; continue ;; esac
  args+=("$1"); shift
done
exec {prog} "${{args[@]}}" {append}
""")
        dest.chmod(0o755)
    for name in ("scripts", "tools", "tests", "docs", "bench"):
        (work / name).symlink_to(source / name)
    shutil.copytree(shared / "data", work / "data")
    for name in ("my_corpus", "corpus"):
        shutil.copytree(shared / name, work / name)
    for name in ("book.txt", "book1.txt", "book2.txt", "run.json", "tokenizer.json"):
        shutil.copy(shared / name, work / name)


def make_shared(shared, tide, source, again):
    """What every sandbox copies: the default corpus prepared once, text files, a run.json."""
    if (shared / "done").exists() and not again:
        return
    if shared.exists():
        shutil.rmtree(shared)
    shared.mkdir(parents=True)
    subprocess.run([tide, "prepare", "--out-dir", "data/fortunes"], cwd=shared, check=True,
                   stdout=subprocess.DEVNULL)
    for name in ("mine", "mydata"):
        shutil.copytree(shared / "data" / "fortunes", shared / "data" / name)
    fortunes = sorted(p for p in Path("/usr/share/games/fortunes").glob("*")
                      if p.is_file() and p.suffix == "" and p.stat().st_size > 20000)
    text = [p.read_text(errors="replace") for p in fortunes[:4]]
    (shared / "my_corpus").mkdir()
    (shared / "corpus").mkdir()
    for k, t in enumerate(text):
        (shared / "my_corpus" / f"part{k}.txt").write_text(t)
    (shared / "corpus" / "a.txt").write_text(text[0])
    (shared / "corpus" / "b.txt").write_text(text[1])
    (shared / "book.txt").write_text(text[0])
    (shared / "book1.txt").write_text(text[1])
    (shared / "book2.txt").write_text(text[2])
    (shared / "run.json").write_text('{"model": {"n_layer": 4, "n_head": 2, "n_embd": 32},\n'
                                     ' "seq_len": 32, "train_steps": 4,\n'
                                     ' "data": {"dir": "data/mine"}}\n')
    shutil.copy(source / "tests" / "fixtures" / "tokenizer" / "hf_bpe.json",
                shared / "tokenizer.json")
    (shared / "done").write_text("")


# OpenMPI as root in a container, as the README's note sets it (tests/mpi/CMakeLists.txt too).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
           "OMPI_MCA_mpi_yield_when_idle": "1", "OMPI_MCA_hwloc_base_binding_policy": "none"}


def run_file(path, args, source, shared):
    commands, samples, errors = parse(path)
    work = Path(args.work) / path.stem
    make_sandbox(work, str(Path(args.tide).resolve()), source, shared)
    out = work / ".docs-test"
    out.mkdir()
    # One bash session per file, commands in document order (an `export` holds for the rest).
    steps = sorted([(c.line, "cmd", c) for c in commands if not c.skip] +
                   [(s.line, "sample", s) for s in samples], key=lambda x: x[0])
    script = ["cd " + sh_quote(str(work)), f"export PATH={sh_quote(str(work / 'bin'))}:$PATH"]
    for k, (_, kind, item) in enumerate(steps):
        text = item.text if kind == "cmd" else item.command
        # A sample runs as printed in a directory of its own (the corpus and build/ linked), so
        # that the runs before it (runs/default, ...) do not change what it prints.
        prefix = ""
        if kind == "sample":
            prefix = (f"export DOCS_TEST_AS_PRINTED=1; mkdir sample{k} && cd sample{k} && "
                      "for d in data build bin; do ln -s ../$d $d; done && ")
        script.append(f"t0=$(date +%s.%N)\n{{ {prefix}{text}\n}} >{out}/{k}.out 2>&1 </dev/null\n"
                      f"echo $? $(date +%s.%N) $t0 >{out}/{k}.rc; unset DOCS_TEST_AS_PRINTED; "
                      f"cd {sh_quote(str(work))}")
    (out / "script.sh").write_text("\n".join(script) + "\n")
    env = dict(os.environ, **MPI_ENV)
    subprocess.run(["bash", str(out / "script.sh")], env=env, check=False)
    failures, stale = [], []
    for k, (_, kind, item) in enumerate(steps):
        fields = (out / f"{k}.rc").read_text().split()
        rc, seconds = int(fields[0]), float(fields[1]) - float(fields[2])
        print(f"  {seconds:6.1f} s  exit {rc}  {path.name}:{item.line}: "
              f"{item.text if kind == 'cmd' else '(sample) ' + item.command}")
        output = (out / f"{k}.out").read_text(errors="replace").rstrip("\n").split("\n")
        if kind == "cmd":
            if rc != 0:
                failures.append(f"{path}:{item.line}: exit {rc}: {item.text}\n" +
                                "\n".join("    " + o for o in output[-15:]))
            continue
        if rc != 0:
            failures.append(f"{path}:{item.line}: sample command exit {rc}: {item.command}\n" +
                            "\n".join("    " + o for o in output[-15:]))
            continue
        head = output[:len(item.head)] if item.elided else output
        tail = output[len(output) - len(item.tail):] if item.elided and item.tail else []
        want = [normalize(x) for x in item.head + item.tail]
        got = [normalize(x) for x in head + tail]
        if want != got:
            stale.append((item, head, tail))
    return commands, samples, errors, failures, stale


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def rewrite(path, stale):
    lines = path.read_text().split("\n")
    for item, head, tail in sorted(stale, key=lambda x: -x[0].line):
        new = item.prompt_lines + head + (["..."] + tail if item.elided else [])
        lines[item.line - 1:item.end - 1] = new
    path.write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["setup", "run", "regen", "list"])
    ap.add_argument("--tide", help="the tide program under test (build/tide)")
    ap.add_argument("--work", help="scratch directory (emptied)")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_intermixed_args()
    source = Path(__file__).resolve().parents[2]
    if args.mode == "list":
        for f in args.files:
            commands, samples, errors = parse(f)
            for c in commands:
                print(f"{f}:{c.line}: {'SKIP (' + c.skip + ') ' if c.skip else ''}{c.text}")
            for s in samples:
                print(f"{f}:{s.line}: SAMPLE {s.command}")
            for e in errors:
                print(e)
        return 0
    if not args.tide or not args.work:
        ap.error("run and regen need --tide and --work")
    shared = Path(args.work) / "_shared"
    make_shared(shared, str(Path(args.tide).resolve()), source, args.mode == "setup")
    if args.mode == "setup":
        return 0
    bad = 0
    for f in args.files:
        commands, samples, errors, failures, stale = run_file(f.resolve(), args, source, shared)
        ran = sum(1 for c in commands if not c.skip)
        print(f"docs-test {f}: {ran} commands run, {len(commands) - ran} skipped, "
              f"{len(samples)} samples")
        for c in commands:
            if c.skip:
                print(f"  skipped {f}:{c.line}: {c.text}  ({c.skip})")
        for e in errors + failures:
            print("FAIL " + e)
        if args.mode == "regen":
            if stale:
                rewrite(f, stale)
                for item, _, _ in stale:
                    print(f"  rewrote the sample at {f}:{item.line} ({item.command})")
        else:
            for item, head, tail in stale:
                print(f"FAIL {f}:{item.line}: the sample output of `{item.command}` is stale; "
                      "run scripts/regen_doc_samples.sh (and check the diff). Now:")
                print("\n".join("    " + x for x in head + (["..."] + tail if item.elided else [])))
        bad += len(errors) + len(failures) + (len(stale) if args.mode == "run" else 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
