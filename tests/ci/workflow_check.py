"""Checks a GitHub Actions workflow of parity's (.github/workflows/parity.yml) without GitHub:
it parses (PyYAML), has the shape Actions needs (on, jobs, runs-on, steps with one `uses` or
`run` each), and names only what exists: every ci/ script and repository path its `run` lines
name is a file here (ci/ scripts executable), every `parity` command line in those lines and
in the ci/ scripts they call uses a subcommand and options that `parity SUB --help` lists,
every variable of its `env` that starts with GATE_ is one ci/gate documents, every artifact
path is one ci/gate writes, the step summary takes a summary written without relative links,
and the summary and uploads run `if: always()` (a failed gate still reports).

Usage: workflow_check.py --repo DIR --parity BINARY [--workflow FILE]
Prints one line per problem and "workflow: FAIL", or "workflow: ok ..."; exit 1 or 0.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

import yaml

KNOWN_ACTIONS = {"actions/checkout", "actions/upload-artifact"}
# parity subcommands that have subcommands of their own: the word after them is one too.
NESTED = {"ckpt", "golden", "bench"}


def logical_lines(text):
    """Lines of a shell script with backslash continuations joined and comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        stripped = cur.strip()
        if stripped and not stripped.startswith("#"):
            out.append(stripped)
        cur = ""
    return out


def words(line):
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lex.whitespace_split = True
        lex.commenters = "#"
        return list(lex)
    except ValueError:
        return line.split()


class Checker:
    def __init__(self, repo, parity):
        self.repo, self.parity = repo, parity
        self.problems = []
        self.help = {}
        self.checked_commands = 0
        self.checked_scripts = set()

    def problem(self, where, what):
        self.problems.append(f"{where}: {what}")

    def help_of(self, path):
        key = tuple(path)
        if key not in self.help:
            r = subprocess.run([self.parity, "help", *path], capture_output=True, text=True)
            self.help[key] = r.stdout if r.returncode == 0 else None
        return self.help[key]

    def check_parity_command(self, where, ws):
        """ws: the words after the parity binary."""
        path = []
        i = 0
        while i < len(ws) and not ws[i].startswith("-"):
            if path and path[-1] not in NESTED:
                break
            path.append(ws[i])
            i += 1
            if len(path) == 2 or path[0] not in NESTED:
                break
        if not path:
            return
        text = self.help_of(path)
        self.checked_commands += 1
        if text is None:
            self.problem(where, f"`parity {' '.join(path)}`: no such command (`parity help {' '.join(path)}` fails)")
            return
        for w in ws[i:]:
            if w in (";", "&&", "||", "|", ">", ">>", "<", "(", ")", "&"):
                break
            if re.fullmatch(r"--?[A-Za-z][-A-Za-z0-9]*(=.*)?", w):
                opt = w.split("=", 1)[0]
                if not re.search(r"(^|[\s,])" + re.escape(opt) + r"(?![-A-Za-z0-9])", text, re.M):
                    self.problem(where, f"`parity {' '.join(path)}` has no option {opt}")

    def check_run(self, where, script):
        for line in logical_lines(script):
            ws = words(line)
            for k, w in enumerate(ws):
                if w.endswith("/parity") or w == "$parity":
                    self.check_parity_command(where, ws[k + 1:])
                m = re.fullmatch(r"(?:\./)?((?:ci|tests|scenarios|golden|docs)/[-\w./]+)", w)
                if m:
                    rel = m.group(1)
                    full = os.path.join(self.repo, rel)
                    if not os.path.exists(full):
                        self.problem(where, f"{rel}: no such file in the repository")
                    elif rel.startswith("ci/") and os.path.isfile(full):
                        if not os.access(full, os.X_OK):
                            self.problem(where, f"{rel}: not executable")
                        elif k == 0 or ws[k - 1] in (";", "&&", "||", "|"):
                            self.check_script(rel)

    def check_script(self, rel):
        """The parity command lines of a ci/ script the workflow runs."""
        if rel in self.checked_scripts:
            return
        self.checked_scripts.add(rel)
        with open(os.path.join(self.repo, rel), encoding="utf-8") as f:
            text = f.read()
        for line in logical_lines(text):
            ws = words(line)
            for k, w in enumerate(ws):
                if w == "$parity" or w.endswith("/parity") and w.startswith(("build/", "$build/", "${BUILD_DIR")):
                    self.check_parity_command(rel, ws[k + 1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--parity", required=True)
    ap.add_argument("--workflow")
    a = ap.parse_args()
    wf_path = a.workflow or os.path.join(a.repo, ".github/workflows/parity.yml")
    c = Checker(a.repo, a.parity)
    try:
        with open(wf_path, encoding="utf-8") as f:
            wf = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        print(f"{wf_path}: {e}\nworkflow: FAIL")
        return 1
    name = os.path.basename(wf_path)
    if not isinstance(wf, dict):
        print(f"{name}: not a mapping\nworkflow: FAIL")
        return 1
    # YAML 1.1 reads the key `on` as true.
    if "on" not in wf and True not in wf:
        c.problem(name, "no `on:` (the events that run it)")
    jobs = wf.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        c.problem(name, "no jobs")
        jobs = {}
    with open(os.path.join(a.repo, "ci/gate"), encoding="utf-8") as f:
        gate = f.read()
    gate_header = "\n".join(line for line in gate.splitlines() if line.startswith("#"))
    steps_seen = 0
    for job_name, job in jobs.items():
        where = f"{name}: jobs.{job_name}"
        if not isinstance(job, dict) or "runs-on" not in job:
            c.problem(where, "no runs-on")
            continue
        env = job.get("env") or {}
        for var in env:
            if str(var).startswith("GATE_") and var not in gate_header:
                c.problem(where, f"env {var}: ci/gate does not read it (not in its header)")
        gate_out = str(env.get("GATE_OUT", os.path.join(str(env.get("BUILD_DIR", "build")), "gate")))
        links_none = str(env.get("GATE_SUMMARY_LINKS", "")) == "none"
        steps = job.get("steps")
        if not isinstance(steps, list) or not steps:
            c.problem(where, "no steps")
            continue
        runs_gate = False
        for i, step in enumerate(steps):
            steps_seen += 1
            sw = f"{where}.steps[{i}]" + (f" ({step.get('name')})" if isinstance(step, dict) and "name" in step else "")
            if not isinstance(step, dict) or ("uses" in step) == ("run" in step):
                c.problem(sw, "a step needs exactly one of `uses` and `run`")
                continue
            if "uses" in step:
                action, _, ref = str(step["uses"]).partition("@")
                if action not in KNOWN_ACTIONS:
                    c.problem(sw, f"uses {action}: not one of {sorted(KNOWN_ACTIONS)}")
                if not re.fullmatch(r"v\d+", ref):
                    c.problem(sw, f"uses {step['uses']}: pin a major version (@v4)")
                if action == "actions/upload-artifact":
                    if str(step.get("if", "")) != "always()":
                        c.problem(sw, "an upload without `if: always()` loses the reports of a failed gate")
                    paths = str((step.get("with") or {}).get("path", "")).split()
                    if not paths:
                        c.problem(sw, "upload-artifact without a path")
                    for p in paths:
                        rest = os.path.relpath(p.rstrip("/"), gate_out)
                        first = rest.split("/")[0]
                        if rest.startswith("..") or first == ".":
                            c.problem(sw, f"upload path {p}: not in the gate's output directory {gate_out}")
                        elif not re.search(r"(\$out/|[{,])" + re.escape(first) + r"\b", gate):
                            c.problem(sw, f"upload path {p}: ci/gate writes no {first} in {gate_out}")
                continue
            script = str(step["run"])
            c.check_run(sw, script)
            if re.search(r"(^|[\s;&|])(\./)?ci/gate\b", script):
                runs_gate = True
            if "GITHUB_STEP_SUMMARY" in script:
                if str(step.get("if", "")) != "always()":
                    c.problem(sw, "the step summary without `if: always()` is lost when the gate fails")
                m = re.search(r"cat\s+(\S+)\s*>>\s*\"?\$GITHUB_STEP_SUMMARY", script)
                if not m:
                    c.problem(sw, "the step summary is not `cat FILE >> \"$GITHUB_STEP_SUMMARY\"`")
                elif m.group(1) != os.path.join(gate_out, "summary.md"):
                    c.problem(sw, f"the step summary reads {m.group(1)}, the gate writes {gate_out}/summary.md")
                elif not links_none:
                    c.problem(sw, "the step summary has relative links, which cannot resolve there: "
                              "set GATE_SUMMARY_LINKS: none")
        if not runs_gate:
            c.problem(where, "no step runs ci/gate")
    for p in c.problems:
        print(p)
    if c.problems:
        print(f"workflow: FAIL ({len(c.problems)} problems)")
        return 1
    print(f"workflow: ok ({len(jobs)} jobs, {steps_seen} steps, {c.checked_commands} parity command lines checked "
          f"in the workflow and {', '.join(sorted(c.checked_scripts))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
