"""The documentation's examples, run as written against a fresh `sluice dev`.

A newcomer's first example has to work. Every fenced block of
README.md, CONTRIBUTING.md, clients/python/README.md and docs/*.md is
either run or checked here, or marked, on the line right before its fence,
with why it is not:

    <!-- example not run: starts the compose stack (Docker) -->

What is run, and how:

- ``sh`` blocks, with bash (``set -eo pipefail``), in a temporary directory,
  with the built ``sluice`` first on PATH and ``SLUICE_NATS_URL`` set to the
  stack's NATS. A block whose lines start with ``$ `` is a transcript: each
  ``$`` command is run, and every output line it shows must be in the
  output, with numbers masked (dates, counts); usage takes up to a second to
  show what was counted (docs/USAGE.md), so a transcript is tried again
  until it matches, for at most 10 s. Any block fails when its output holds
  a gateway error body other than ``rate_limited`` (curl exits 0 on a 4xx).
- ``python`` blocks, with this Python (the venv that has the client).
- ``text`` blocks, and unlabelled ones, that show what a command prints:
  the line before the fence names the command,

      <!-- output of: sluice nats-config -->

  or, for a few lines of shell, a comment that ends on that line::

      <!-- output of:
      printf 'partitions = 0\\n' > sluice.toml
      sluice nats-config --config sluice.toml
      -->

  The command runs like an ``sh`` block, in its place among them (so it
  sees the files they wrote), and every line the block shows must be in
  what it prints (stdout and stderr), with numbers masked as in a
  transcript and tried again the same way. Its exit status is not checked:
  error messages are output too.

Each document gets its own fresh ``sluice dev`` (2 workers, on free loopback
ports); its blocks run in order, as a reader would type them. The only
change made to a block: ``localhost:8080`` / ``127.0.0.1:8080`` and
``127.0.0.1:4222`` / ``localhost:4222`` become the stack's ports (in the
command of an output sample too, not in the lines it shows).

Every other ``text`` or unlabelled block (a picture, a byte dump, a sample
of a setup a ``sluice dev`` does not have) says why it is not output:
``<!-- text not output: why -->``; an unmarked one fails.

Blocks of other kinds (``rust``, ``toml``, ``json``, ``yaml``) are not run
and need no mark here; any other label is refused, so a runnable block
cannot hide behind one. A ``toml`` block is a config: it must be one the
real parser accepts (``sluice nats-config --config``), unless the line
before its fence marks it as a part of one, ``<!-- fragment: why -->``;
then it must still be valid TOML. A ``json`` block is a wire body, checked
against its Rust type by tests/tests/json_examples.rs.

Run by scripts/test-docs.sh (at the end of scripts/test.sh), with
SLUICE_BIN and SLUICE_NATS_SERVER set.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "clients/python/README.md"] + sorted(
    (ROOT / "docs").glob("*.md")
)
RUN = {"sh", "python"}
OUTPUT = {"text", ""}
NOT_CODE = {"rust", "toml", "json", "yaml"} | OUTPUT
MARK = re.compile(r"^\s*<!-- example not run: (?P<reason>\S.*?) -->$")
FRAGMENT = re.compile(r"^\s*<!-- fragment(: (?P<reason>\S.*?))? -->$")
OUTPUT_OF = re.compile(r"^\s*<!-- output of: (?P<command>\S.*?) -->$")
OUTPUT_OF_START = re.compile(r"^\s*<!-- output of:\s*$")
NOT_OUTPUT = re.compile(r"^\s*<!-- text not output: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^\s*```(?P<info>[A-Za-z0-9_+-]*)\s*$")
GATEWAY_ERROR = re.compile(r'"error"\s*:\s*"(?!rate_limited")')
COMMAND_TIMEOUT = 60
TRANSCRIPT_WITHIN = 10.0


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    not_run: Optional[str]  # the reason, when marked
    fragment: bool  # marked as a part of a config, not a whole one
    output_of: Optional[str] = None  # the command whose output a text block shows
    not_output: Optional[str] = None  # why a text block is not output, when marked

    def where(self) -> str:
        return "{}:{}".format(self.path.relative_to(ROOT), self.line)


def blocks(path: Path) -> List[Block]:
    """The fenced blocks of a markdown file, each with its mark if any."""
    lines = path.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, "{}:{}: a fence that is never closed".format(path, i + 1)
        previous = lines[i - 1] if i > 0 else ""
        mark = MARK.match(previous)
        not_output = NOT_OUTPUT.match(previous)
        found.append(
            Block(
                path,
                i + 1,
                m.group("info"),
                "\n".join(lines[i + 1 : end]) + "\n",
                mark and mark.group("reason"),
                bool(FRAGMENT.match(previous)),
                output_command(lines, i),
                not_output and not_output.group("reason"),
            )
        )
        i = end + 1
    return found


def output_command(lines: List[str], fence: int) -> Optional[str]:
    """The command of an ``output of`` mark that ends right before the fence:
    one line, or the lines of a comment that opens with ``<!-- output of:``."""
    if fence == 0:
        return None
    one = OUTPUT_OF.match(lines[fence - 1])
    if one:
        return one.group("command")
    if lines[fence - 1].strip() != "-->":
        return None
    start = next((j for j in range(fence - 2, -1, -1) if "<!--" in lines[j] or "-->" in lines[j]), None)
    if start is None or not OUTPUT_OF_START.match(lines[start]):
        return None
    return "\n".join(lines[start + 1 : fence - 1]).strip() or None


def runnable(path: Path) -> List[Block]:
    """The blocks run against the document's stack, in order: ``sh`` and
    ``python`` blocks, and the commands of output samples."""
    return [b for b in blocks(path)
            if (b.info in RUN and b.not_run is None) or (b.info in OUTPUT and b.output_of)]


def test_every_block_is_run_or_says_why_not():
    problems = []
    for path in DOCUMENTS:
        for b in blocks(path):
            if b.info not in RUN | NOT_CODE:
                problems.append("{}: unknown label {!r}: use one of {}".format(b.where(), b.info, sorted(RUN | NOT_CODE)))
            elif b.not_run is not None and b.info not in RUN:
                problems.append("{}: a {!r} block is never run; drop its mark".format(b.where(), b.info))
            elif b.info in OUTPUT and not b.output_of and not b.not_output:
                problems.append("{}: a {} block shows neither a command's output nor says why not: put "
                                "<!-- output of: COMMAND --> or <!-- text not output: why --> on the line "
                                "before the fence".format(b.where(), repr(b.info) if b.info else "unlabelled"))
            elif (b.output_of or b.not_output) and b.info not in OUTPUT:
                problems.append("{}: a {!r} block is not output; drop its mark".format(b.where(), b.info))
    assert not problems, "\n".join(problems)
    # A newcomer's first pages have examples that run.
    for first in ("README.md", "clients/python/README.md"):
        assert runnable(ROOT / first), "{}: no example is run".format(first)


def test_every_toml_block_is_a_config_sluice_accepts(tmp_path: Path):
    """A config example that does not parse misleads every reader who copies
    it (one showed a field inside a limit that belongs to the policy)."""
    import tomllib

    sluice = os.environ["SLUICE_BIN"]
    problems = []
    for path in DOCUMENTS:
        for b in blocks(path):
            if b.info != "toml":
                continue
            try:
                tomllib.loads(b.text)
            except tomllib.TOMLDecodeError as e:
                problems.append("{}: not TOML: {}".format(b.where(), e))
                continue
            if b.fragment:
                continue
            config = tmp_path / "example.toml"
            config.write_text(b.text)
            out = subprocess.run(
                [sluice, "nats-config", "--config", str(config)],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
            )
            if out.returncode != 0:
                problems.append("{}: sluice refuses it ({}); fix it, or mark a part of a config "
                                "with <!-- fragment: why --> on the line before".format(
                                    b.where(), out.stderr.strip().replace(str(config), "the block")))
    assert not problems, "\n".join(problems)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dev:
    """`sluice dev` on free loopback ports, ready once its self-check printed."""

    def __init__(self, sluice: str):
        self.nats_port, self.http_port = free_port(), free_port()
        self.url = "nats://127.0.0.1:{}".format(self.nats_port)
        env = {k: v for k, v in os.environ.items() if k != "SLUICE_CONFIG"}
        self.proc = subprocess.Popen(
            [sluice, "dev", "--workers", "2", "--nats-port", str(self.nats_port),
             "--listen", "127.0.0.1:{}".format(self.http_port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        self.log: List[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        # The self-check is its last line at start: after it, nothing runs
        # but what the examples ask.
        if not self.ready.wait(90) or self.proc.poll() is not None:
            self.stop()
            pytest.fail("sluice dev did not start:\n" + "".join(self.log[-40:]))

    def _read(self):
        checking = False
        for line in self.proc.stderr:
            self.log.append(line)
            if "sluice dev: self-check" in line:
                checking = True
            elif checking and line.strip():  # the 16 answers
                self.ready.set()
        self.ready.set()  # exited: __init__ sees it

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def adapt(self, text: str) -> str:
        """The block with the stack's ports in place of the usual ones."""
        for host in ("localhost", "127.0.0.1"):
            text = text.replace("{}:8080".format(host), "127.0.0.1:{}".format(self.http_port))
            text = text.replace("{}:4222".format(host), "127.0.0.1:{}".format(self.nats_port))
        return text


def masked(line: str) -> str:
    return " ".join(re.sub(r"\d+", "#", line).split())


def run(argv: List[str], cwd: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT)


def transcript(text: str) -> List[tuple]:
    """``[(command, [shown output lines])]`` of a block with ``$`` prompts."""
    steps: List[tuple] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    return steps


def shows(command: str, want: List[str], where: str, cwd: str, env: dict, exit_zero: bool) -> None:
    """Runs ``command`` until every line of ``want`` is in what it prints
    (numbers masked), for at most TRANSCRIPT_WITHIN seconds."""
    deadline = time.monotonic() + TRANSCRIPT_WITHIN
    while True:
        out = run(["bash", "-c", "set -eo pipefail\n" + command], cwd, env)
        printed = out.stdout if exit_zero else out.stdout + out.stderr
        got = {masked(line) for line in printed.splitlines()}
        missing = [w for w in want if masked(w) not in got]
        if (out.returncode == 0 or not exit_zero) and not missing:
            return
        if time.monotonic() > deadline:
            pytest.fail("{}: `$ {}` (exit {}) does not show\n  {}\nit printed:\n{}{}".format(
                where, command, out.returncode, "\n  ".join(missing), out.stdout, out.stderr))
        time.sleep(0.2)


def run_block(block: Block, dev: Dev, cwd: str, env: dict) -> None:
    if block.info in OUTPUT:
        want = [line for line in block.text.splitlines() if line.strip()]
        shows(dev.adapt(block.output_of), want, block.where(), cwd, env, exit_zero=False)
        return
    text = dev.adapt(block.text)
    if block.info == "python":
        script = Path(cwd) / "example.py"
        script.write_text(text)
        out = run([sys.executable, str(script)], cwd, env)
        assert out.returncode == 0, "{}: exit {}\n{}{}".format(block.where(), out.returncode, out.stdout, out.stderr)
        return
    steps = transcript(text)
    if not steps:
        out = run(["bash", "-c", "set -eo pipefail\n" + text], cwd, env)
        shown = out.stdout + out.stderr
        assert out.returncode == 0, "{}: exit {}\n{}".format(block.where(), out.returncode, shown)
        assert not GATEWAY_ERROR.search(shown), "{}: the gateway refused:\n{}".format(block.where(), shown)
        return
    for command, want in steps:
        shows(command, want, block.where(), cwd, env, exit_zero=True)


@pytest.mark.parametrize(
    "path", [p for p in DOCUMENTS if runnable(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_examples_run_against_a_fresh_sluice_dev(path: Path, tmp_path: Path):
    sluice = os.environ["SLUICE_BIN"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sluice").symlink_to(sluice)
    nats_server = os.environ.get("SLUICE_NATS_SERVER")
    if nats_server:
        (bin_dir / "nats-server").symlink_to(nats_server)
    dev = Dev(sluice)
    env = dict(os.environ, PATH="{}:{}".format(bin_dir, os.environ["PATH"]), SLUICE_NATS_URL=dev.url)
    env.pop("SLUICE_CONFIG", None)
    work = tmp_path / "work"
    work.mkdir()
    try:
        for block in runnable(path):
            run_block(block, dev, str(work), env)
    except BaseException:
        print("".join(dev.log[-40:]), file=sys.stderr)
        raise
    finally:
        code = dev.stop()
    assert code == 0, "sluice dev exited {}:\n{}".format(code, "".join(dev.log[-20:]))
