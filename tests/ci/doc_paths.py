#!/usr/bin/env python3
"""Every repository path that the README, the docs and the parity binary's own text name
exists (issue 43: `parity explain` cited FOLDINGS.md, which the repository does not have).

Scans README.md, python/README.md, docs/**/*.md and the string literals of src/**/*.{cpp,h}
(what the binary prints) for paths under the repository's top folders (src/, docs/, ci/, ...)
and for bare upper-case note names (FOLDINGS.md); a path with a placeholder in it (NAME, FILE,
*, <...>, {...}) is a pattern, not a file, and is left out. Prints every missing path with the
files that name it and exits 1; else "doc paths: ok (N paths named in M files)".

Usage: doc_paths.py REPO [--plant TEXT]   (--plant: scan TEXT as one more file; the test that
the check can fail plants a path that does not exist)
"""
import pathlib
import re
import sys

TOP = ("src", "docs", "ci", "tests", "scenarios", "golden", "kernels", "python", "cmake", ".ci", ".github")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[A-Za-z0-9_./-]*)")
NOTE = re.compile(r"(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
PLACEHOLDER = re.compile(r"[A-Z]{3,}|\*|\.\.\.|<|\{")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
# Named on purpose though not in the repository: a user's own files in examples, what a
# command writes, what the build makes.
EXAMPLES = {
    "scenarios/mine.json": "a user's scenario (README)",
    "golden/mine.json": "its golden (README)",
    "scenarios/x.json": "an example name (docs/scenario.md)",
    "golden/plots/": "what `parity plot` writes by default",
    "golden/plots/group": "what `parity plot` writes by default",
    "tests/parallel/parallel_worker": "a built test binary (under the build directory)",
}
NOTE_PLACEHOLDERS = {"FILE", "NAME", "DIR", "OUT", "PATH"}


def candidates(text):
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,:;-")
        end = m.end(1)
        following = text[end:end + 1]
        if PLACEHOLDER.search(p) or following in ("<", "{", "*") or p.endswith("/."):
            continue
        yield p
    for m in NOTE.finditer(text):
        if m.group(1)[:-3] not in NOTE_PLACEHOLDERS:
            yield m.group(1)


def exists(repo, p):
    if "/" not in p:  # a bare note name: beside the README or among the docs
        return (repo / p).exists() or any(repo.glob(f"docs/**/{p}"))
    return (repo / p.rstrip("/")).exists()


def main():
    repo = pathlib.Path(sys.argv[1]).resolve()
    sources = {}
    for f in [repo / "README.md", repo / "python" / "README.md", *sorted((repo / "docs").rglob("*.md"))]:
        if f.exists():
            sources[str(f.relative_to(repo))] = f.read_text(encoding="utf-8")
    for f in sorted(list((repo / "src").rglob("*.cpp")) + list((repo / "src").rglob("*.h"))):
        lines = [l for l in f.read_text(encoding="utf-8").splitlines() if not l.lstrip().startswith("//")]
        sources[str(f.relative_to(repo))] = "\n".join(s for l in lines for s in STRING.findall(l))
    if "--plant" in sys.argv:
        sources["(planted)"] = sys.argv[sys.argv.index("--plant") + 1]
    named, missing = {}, {}
    for where, text in sources.items():
        for p in candidates(text):
            named.setdefault(p, set()).add(where)
    for p, where in sorted(named.items()):
        if p not in EXAMPLES and not exists(repo, p):
            missing[p] = where
    for p, where in missing.items():
        print(f"missing: {p} (named in {', '.join(sorted(where))})")
    if missing:
        print(f"doc paths: FAIL ({len(missing)} of {len(named)} paths do not exist)")
        return 1
    print(f"doc paths: ok ({len(named)} paths named in {len(sources)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
