#!/usr/bin/python3
"""Checks that the project's install scripts declare what the tree uses.

For every header the tree includes from outside itself, every program its
scripts, tests and CMake files run, and every Python module its Python files
import, this finds the file on this machine, asks dpkg which Debian package
owns it, and fails unless that package is named by an install script or is
pulled in by one that is (Depends and Pre-Depends, followed recursively; no
Recommends, since the scripts install with --no-install-recommends), or is
part of every Debian system (Essential: yes or Priority: required).

A package installed by hand therefore cannot make this pass: what counts is
what the scripts name, not what the machine has. Something the tree uses
that this machine does not have at all fails too.

Usage: check_deps.py SOURCE_DIR [--script PATH ...] [--verbose]
  --script PATH   an install script that prints its packages with --list;
                  default: scripts/install-deps.sh and scripts/install-softroce.sh
Exit status: 0 when everything is declared, 1 otherwise (each miss is named
with the package, the file that needs it and the thing it needs).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import defaultdict

SOURCE_EXT = (".c", ".cc", ".cpp", ".h", ".hpp")
SKIP_DIRS = {".git", "corpus"}

SHELL_WORDS = {
    # keywords and builtins: not programs
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
    "esac", "in", "function", "select", "time", "return", "exit", "break", "continue",
    "local", "declare", "typeset", "export", "readonly", "unset", "shift", "set", "trap",
    "eval", "exec", "source", ".", "cd", "pwd", "echo", "printf", "read", "wait", "true",
    "false", "test", "[", "[[", "]]", "]", "let", "type", "command", "builtin", "hash",
    "ulimit", "umask", "kill", "jobs", "fg", "bg", "disown", "alias", "unalias", "getopts",
    "pushd", "popd", "dirs", "mapfile", "readarray", "shopt", "caller", "enable", "help",
    "history", "suspend", "times", "compgen", "complete", "{", "}", "!", ":",
}
# Wrappers whose argument is the program that really runs.
WRAPPERS = {"sudo", "env", "nohup", "setsid", "exec", "time", "nice", "stdbuf", "xargs",
            "command", "taskset", "timeout", "chroot", "unshare", "ionice", "!"}


def tree_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not (rel == "." and d.startswith("build"))]
        for f in filenames:
            yield os.path.join(dirpath, f)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# --- what the install scripts declare ---------------------------------------

def declared_packages(scripts):
    names = set()
    for s in scripts:
        out = run(["bash", s, "--list"])
        if out.returncode != 0:
            sys.exit(f"check_deps: `bash {s} --list` failed: {out.stderr.strip()}")
        names.update(w for w in out.stdout.split() if w)
    return names


def dpkg_database():
    """Installed packages: name -> (depends alternatives, essential-or-required)
    and virtual name -> providers."""
    out = run(["dpkg-query", "-W", "-f",
               "${db:Status-Status}\t${Package}\t${Essential}\t${Priority}\t"
               "${Pre-Depends}\t${Depends}\t${Provides}\n"]).stdout
    pkgs, provides = {}, defaultdict(set)
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) != 7 or fields[0] not in ("installed", "triggers-pending", "triggers-awaited"):
            continue
        _, name, essential, priority, pre, dep, prov = fields
        alts = []
        for clause in filter(None, (c.strip() for c in (pre + "," + dep).split(","))):
            alts.append([re.sub(r"[\s(:].*", "", a.strip()) for a in clause.split("|")])
        pkgs[name] = (alts, essential == "yes" or priority == "required")
        for p in filter(None, (p.strip() for p in prov.split(","))):
            provides[re.sub(r"[\s(:].*", "", p)].add(name)
    return pkgs, provides


def closure(roots, pkgs, provides):
    """Packages a fresh machine gets from installing `roots`, as near as the
    installed database tells: for `a | b` the first alternative this machine
    can satisfy (apt's choice too, when nothing else was installed first)."""
    seen = set()
    todo = [r for r in roots]
    while todo:
        name = todo.pop()
        targets = [name] if name in pkgs else sorted(provides.get(name, ()))
        for t in targets:
            if t in seen:
                continue
            seen.add(t)
            for alts in pkgs[t][0]:
                for a in alts:
                    if a in pkgs or a in provides:
                        todo.append(a)
                        break
    return seen


# --- what the tree uses ------------------------------------------------------

def include_roots(source):
    roots = []
    out = run(["g++", "-xc++", "-std=c++20", "-E", "-v", "-"], input="").stderr
    grab = False
    for line in out.splitlines():
        if line.startswith("#include <...> search starts here"):
            grab = True
        elif line.startswith("End of search list"):
            grab = False
        elif grab:
            roots.append(line.strip())
    # Headers found through pkg-config, the torch extension's and the
    # fuzzers' (clang's resource directory) include paths.
    for mod in ["tomlplusplus", "libfabric", "libibverbs", "ompi-cxx"]:
        for flag in run(["pkg-config", "--cflags-only-I", mod]).stdout.split():
            roots.append(flag[2:])
    roots += ["/usr/include/torch/csrc/api/include", "/usr/include/python3.11",
              "/usr/lib/x86_64-linux-gnu/openmpi/include"]
    clang = shutil.which("clang")
    if clang:
        res = run([clang, "-print-resource-dir"]).stdout.strip()
        if res:
            roots.append(os.path.join(res, "include"))
    return [r for r in dict.fromkeys(roots) if os.path.isdir(r)]


def headers(source):
    """{header name: [files that include it]} for headers outside the tree."""
    tree_paths = set()
    files = []
    for f in tree_files(source):
        rel = os.path.relpath(f, source)
        tree_paths.add(rel)
        if f.endswith(SOURCE_EXT):
            files.append(f)
    suffixes = set()
    for p in tree_paths:
        parts = p.split("/")
        for i in range(len(parts)):
            suffixes.add("/".join(parts[i:]))
    used = defaultdict(list)
    pattern = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
    for f in files:
        with open(f, errors="replace") as fh:
            for line in fh:
                m = pattern.match(line)
                if not m:
                    continue
                name = m.group(2)
                if name in suffixes:
                    continue  # in the tree
                if m.group(1) == '"' and os.path.exists(os.path.join(os.path.dirname(f), name)):
                    continue
                used[name].append(os.path.relpath(f, source))
    return used


def shell_commands(text):
    """Words in command position in a shell script. A heuristic: heredocs,
    comments and single-quoted text (awk and sed programs) are dropped, then
    each command segment's first word after assignments and wrappers is
    taken. Only words that name a program on this machine are checked, so a
    stray word costs nothing; a program used in command position is found."""
    kept = []
    heredoc = None
    for raw in text.splitlines():
        if heredoc:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", raw)
        if m and "<<<" not in raw:
            heredoc = m.group(1)
        kept.append(re.sub(r"(^|\s)#.*$", "", raw))
    body = re.sub(r"'[^']*'", "''", "\n".join(kept))
    words = set()
    # Compilers chosen through CC/CXX defaults: ${CC:-clang}.
    words.update(re.findall(r"\b(?:CC|CXX)=\$\{(?:CC|CXX):-([A-Za-z][A-Za-z0-9+._-]*)\}", body))
    # Array literals spread over lines (package lists, argument lists) are data.
    body = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\+?=\([^()]*\)", "", body)
    for line in body.splitlines():
        for seg in re.split(r"\$\(|`|;|&&|\|\||\||\(|\)|\bthen\b|\bdo\b|\belse\b|\{|\}", line):
            try:
                toks = shlex.split(seg, posix=True)
            except ValueError:
                toks = seg.split()
            i = 0
            while i < len(toks):
                t = toks[i]
                if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", t) or t in ("if", "while", "until", "!",
                                                                      "elif", "then", "do"):
                    i += 1
                    continue
                if t in WRAPPERS:
                    words.add(t)
                    i += 1
                    # the wrapper's options and, for timeout, its duration
                    while i < len(toks) and (toks[i].startswith("-") or
                                             (t == "timeout" and re.match(r"^[0-9.]+[smh]?$", toks[i])) or
                                             (t == "taskset" and re.match(r"^[0-9,-]+$", toks[i])) or
                                             (t == "env" and "=" in toks[i])):
                        i += 1
                    continue
                if t == "ip" and i + 3 < len(toks) and toks[i + 1] == "netns" and toks[i + 2] == "exec":
                    words.add("ip")
                    i += 4
                    continue
                words.add(t)
                break
    return words


def sources(source, wanted):
    """(relative path, text) of the tree's files for which wanted(rel) holds."""
    for f in tree_files(source):
        rel = os.path.relpath(f, source)
        if wanted(rel):
            with open(f, errors="replace") as fh:
                yield rel, fh.read()


def programs(source):
    """{program name: [files that run it]}."""
    used = defaultdict(list)
    scripts = list(sources(source, lambda rel: rel.endswith(".sh") or rel == ".ci/run"))
    funcs = {m.group(1) for _, text in scripts
             for m in re.finditer(r"^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_-]*)\s*\(\)", text, re.M)}
    for rel, text in scripts:
        if text.startswith("#!/bin/busybox"):
            continue  # busybox applets (busybox-static), run inside the guest's initramfs
        for w in shell_commands(text):
            if w not in SHELL_WORDS and w not in funcs and re.match(r"^[A-Za-z][A-Za-z0-9._+-]*$", w):
                used[w].append(rel)
    # CMake: add_test(... COMMAND prog ...) with a plain program name, and find_program.
    cmake = lambda rel: rel.endswith("CMakeLists.txt") or rel.endswith(".cmake")
    for rel, text in sources(source, cmake):
        for m in re.finditer(r"\bCOMMAND\s+([A-Za-z][A-Za-z0-9._+-]*)\b", text):
            used[m.group(1)].append(rel)
        for m in re.finditer(r"find_program\(\s*\w+\s+(?:NAMES\s+)?([A-Za-z][A-Za-z0-9._+-]*)", text):
            used[m.group(1)].append(rel)
    # Python: subprocess argument lists that start with a literal program.
    for rel, text in sources(source, lambda rel: rel.endswith(".py")):
        for m in re.finditer(r"(?:run|Popen|call|check_call|check_output)\(\s*\[\s*[\"']([A-Za-z][A-Za-z0-9._+-]*)[\"']", text):
            used[m.group(1)].append(rel)
    return used


def python_modules(source):
    """{top-level module: [files that import it]}, the tree's own modules aside."""
    used = defaultdict(list)
    files = list(sources(source, lambda rel: rel.endswith(".py")))
    local = {os.path.splitext(os.path.basename(rel))[0] for rel, _ in files}
    for _, dirnames, _ in os.walk(source):
        local.update(dirnames)
    for rel, text in files:
        for m in re.finditer(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.M):
            if m.group(1) not in local and m.group(1) != "__future__":
                used[m.group(1)].append(rel)
    return used


# --- from a thing to its package ---------------------------------------------

def owners(paths):
    """{path: package} for the paths dpkg knows."""
    result = {}
    if not paths:
        return result
    out = run(["dpkg", "-S"] + sorted(paths)).stdout
    for line in out.splitlines():
        if ": " not in line or line.startswith("diversion"):
            continue
        pkgs, path = line.split(": ", 1)
        result[path] = re.sub(r":.*", "", pkgs.split(",")[0].strip())
    return result


def variants(path):
    """The spellings dpkg may have recorded for a path (usrmerge, links)."""
    return list(dict.fromkeys([path, os.path.realpath(path),
                               re.sub(r"^/usr(/s?bin|/lib)", r"\1", path),
                               re.sub(r"^/(s?bin|lib)", r"/usr/\1", path)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--script", action="append")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    source = os.path.abspath(args.source)
    scripts = args.script or [os.path.join(source, "scripts/install-deps.sh"),
                              os.path.join(source, "scripts/install-softroce.sh")]
    named = declared_packages(scripts)
    pkgs, provides = dpkg_database()
    base = {p for p, (_, required) in pkgs.items() if required}
    covered = closure(named | base, pkgs, provides)
    not_installed = sorted(n for n in named if n not in pkgs and n not in provides)

    wanted = []  # (kind, thing, path or None, users)

    roots = include_roots(source)
    for name, users in sorted(headers(source).items()):
        path = next((os.path.join(r, name) for r in roots if os.path.isfile(os.path.join(r, name))), None)
        wanted.append(("header", f"<{name}>", path, users))

    system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    problems = []
    for prog, users in sorted(programs(source).items()):
        if os.path.isfile(os.path.join(source, prog)):
            continue
        path = shutil.which(prog, path=system_path)
        if path is None:
            continue  # a word, not a program (see shell_commands)
        if path.startswith("/usr/local/"):
            problems.append(f"program {prog} (used by {users[0]}) resolves to {path}, outside any "
                            "Debian package: install it from a package the scripts name")
            continue
        wanted.append(("program", prog, path, users))

    mods = python_modules(source)
    if mods:
        probe = ("import importlib.util,sys\n"
                 "for m in sys.argv[1:]:\n"
                 "  s=importlib.util.find_spec(m)\n"
                 "  print(m, s.origin if s and s.origin else ('-' if s else '?'))\n")
        for line in run(["/usr/bin/python3", "-c", probe] + sorted(mods)).stdout.splitlines():
            mod, origin = line.split(" ", 1)
            if origin in ("built-in", "frozen", "-"):
                continue  # part of the interpreter
            wanted.append(("Python module", mod, None if origin == "?" else origin, mods[mod]))

    # One dpkg -S for everything (it reads its whole database per call).
    all_variants = sorted({v for _, _, path, _ in wanted if path for v in variants(path)})
    owner = owners(all_variants)

    for kind, thing, path, users in wanted:
        who = ", ".join(sorted(set(users))[:3]) + (" ..." if len(set(users)) > 3 else "")
        if path is None:
            problems.append(f"{kind} {thing} (used by {who}) is not on this machine: "
                            "no install script provides it")
            continue
        pkg = next((owner[v] for v in variants(path) if v in owner), None)
        if pkg is None:
            problems.append(f"{kind} {thing} ({path}, used by {who}) belongs to no Debian package: "
                            "install it from a package the scripts name")
        elif pkg not in covered:
            problems.append(f"package {pkg} is needed but no install script names it or pulls it in: "
                            f"{who} uses {kind} {thing} ({path}); add {pkg} to scripts/install-deps.sh")
        elif args.verbose:
            print(f"ok  {kind} {thing} -> {pkg}")
    checked = len(wanted)

    for n in not_installed:
        problems.append(f"package {n} is named by an install script but is not installed here: "
                        "run the install scripts first")
    for p in problems:
        print("MISSING:", p)
    print(f"check_deps: {checked} headers, programs and modules checked against "
          f"{len(named)} named packages ({len(covered)} with their dependencies and the "
          f"required base); {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
