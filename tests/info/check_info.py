#!/usr/bin/python3
"""chorus-info --json and --config against what this test sets up.

usage: check_info.py CHORUS_INFO VERBS   (VERBS: yes|no = verbs is built and
usable here or not, absent = not built)

Runs chorus-info with a config file, one CHORUS_* variable and defaults for
the rest, and checks: every plugin's loads/usable answers and what it
implements; each key's value and source (file:line, environment variable,
default); a broken configuration gives exit status 1 with the error; the text
forms of the same. Prints "N passed, M failed".
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

info, verbs = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(what, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok    {what}")
    else:
        failed += 1
        print(f"FAIL  {what} {detail}")


def run(args, extra_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    env.update(extra_env)
    p = subprocess.run([info] + args, env=env, capture_output=True, text=True, timeout=50)
    return p.returncode, p.stdout, p.stderr


with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
    f.write("# test config\n[algorithm]\nstaging_slots = 4\n\n[transport]\ntcp.sockets = 2\n")
    cfg_path = f.name
try:
    env = {"CHORUS_CONFIG": cfg_path, "CHORUS_ALGORITHM_CHANNELS": "3"}
    rc, out, err = run(["--json"], env)
    check("--json exits 0", rc == 0, f"(exit {rc}: {err})")
    doc = json.loads(out)
    check("exit_status in the JSON matches", doc["exit_status"] == rc)
    plugins = {(p["kind"], p["name"]): p for p in doc["plugins"]}

    for name in ("tcp", "shm"):
        p = plugins.get(("transport", name))
        check(f"{name}: loads and usable", p and p["loads"] and p["usable"], str(p))
        check(f"{name}: ABI 1.x and optional ops listed",
              p and p["abi"].startswith("1.") and "describe" in p["optional_ops"], str(p))
    if verbs != "absent":
        p = plugins.get(("transport", "verbs"))
        check("verbs: loads is its own answer (yes)", p and p["loads"] is True, str(p))
        check(f"verbs: usable here is its own answer ({verbs})",
              p and p["usable"] is (verbs == "yes"), str(p))
    every = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"]
    # The ring declares its two neighbours (v2 table minor 1, kPeers).
    for name, peers in (("ring", "ring"), ("mesh", "all")):
        p = plugins.get(("algorithm", name))
        check(f"{name}: loads, usable, peers {peers}",
              p and p["loads"] and p["usable"] and p["peers"] == peers, str(p))
        check(f"{name}: implements the five collectives",
              p and all(c in p["collectives"] for c in every), str(p))
        check(f"{name}: declares both determinism flags",
              p and {"deterministic_across_ranks", "deterministic_across_runs"} <= set(p["flags"]),
              str(p))
    auto = doc["builtin_transports"][0]
    check("auto: loads and usable (shm + tcp)",
          auto["name"] == "auto" and auto["loads"] and auto["usable"], str(auto))
    check("default transport auto usable",
          doc["default_transport"] == {"name": "auto", "usable": True, "reason": ""},
          str(doc.get("default_transport")))

    conf = doc["configuration"]
    settings = {s["key"]: s for s in conf["settings"]}
    check("configuration usable, file named", conf["usable"] and conf["file"] == cfg_path, str(conf))

    def setting(key, value, source):
        s = settings.get(key)
        check(f"{key} = {value} from {source}",
              s is not None and s["value"] == value and s["source"] == source, str(s))

    setting("algorithm.staging_slots", "4", f"{cfg_path}:3")
    setting("transport.tcp.sockets", '"2"', f"{cfg_path}:6")
    setting("algorithm.channels", "3", "environment variable CHORUS_ALGORITHM_CHANNELS")
    setting("algorithm.deterministic", "false", "default")
    setting("algorithm.switch_bytes", "0", "default")
    setting("timeout.collective", "300", "default")
    setting("transport.name", '"auto"', "default")
    setting("bootstrap.coordinator", None, "unset")
    for c in every:
        setting(f"algorithm.{c}", '"auto"', "default")

    # The text form says the same.
    rc, out, err = run(["--config"], env)
    lines = {l.split()[0]: l for l in out.splitlines() if l.startswith("  ")}
    check("--config exits 0", rc == 0, f"(exit {rc}: {err})")
    check("--config: channels = 3 from the environment",
          "= 3 " in lines.get("algorithm.channels", "")
          and lines["algorithm.channels"].endswith("# environment variable CHORUS_ALGORITHM_CHANNELS"),
          lines.get("algorithm.channels"))
    check("--config: staging_slots from file:line",
          lines.get("algorithm.staging_slots", "").endswith(f"# {cfg_path}:3"),
          lines.get("algorithm.staging_slots"))
    rc, out, err = run([], env)
    verbs_line = [l for l in out.splitlines() if l.startswith("  verbs ")]
    if verbs != "absent":
        want = "yes    yes" if verbs == "yes" else "yes    no"
        check(f"text: verbs LOADS/USABLE columns read '{want}'",
              verbs_line and want in verbs_line[0], str(verbs_line))

    # A broken configuration: exit 1, the error with its suggestion.
    with open(cfg_path, "w") as f:
        f.write("[algorithm]\nchanels = 2\n")
    rc, out, err = run(["--config", "--json"], {"CHORUS_CONFIG": cfg_path})
    doc = json.loads(out)
    check("broken config: exit 1", rc == 1 and doc["exit_status"] == 1, f"(exit {rc})")
    check("broken config: not usable, error suggests algorithm.channels",
          doc["configuration"]["usable"] is False
          and "did you mean 'algorithm.channels'?" in doc["configuration"]["error"],
          str(doc["configuration"]))
    rc, out, err = run(["--bogus"], {})
    check("unknown option: exit 2", rc == 2, f"(exit {rc})")

    # An installation without shm (a copy of chorus-info beside a plugin
    # folder holding tcp only): the default auto still works, every peer
    # over tcp; a transport.auto.local that names shm makes it unusable.
    with tempfile.TemporaryDirectory() as tree:
        os.makedirs(f"{tree}/bin")
        os.makedirs(f"{tree}/lib/chorus")
        shutil.copy(info, f"{tree}/bin/chorus-info")
        tcp = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(info))),
                           "lib", "chorus", "libchorus-transport-tcp.so")
        shutil.copy(tcp, f"{tree}/lib/chorus/")
        lone = f"{tree}/bin/chorus-info"
        p = subprocess.run([lone, "--json"], env={}, capture_output=True, text=True, timeout=50)
        doc = json.loads(p.stdout)
        auto = doc["builtin_transports"][0]
        check("no shm: auto usable, local falls back to tcp",
              auto["loads"] and auto["usable"] and auto["local_falls_back"], str(auto))
        check("no shm: default transport auto usable",
              doc["default_transport"]["usable"] is True, str(doc["default_transport"]))
        p = subprocess.run([lone], env={}, capture_output=True, text=True, timeout=50)
        check("no shm: text says every peer goes over tcp",
              "shm is missing or not usable here, so every peer goes over tcp" in p.stdout,
              p.stdout[-600:])
        p = subprocess.run([lone, "--json"], env={"CHORUS_TRANSPORT_AUTO_LOCAL": "shm"},
                           capture_output=True, text=True, timeout=50)
        doc = json.loads(p.stdout)
        auto = doc["builtin_transports"][0]
        check("no shm, transport.auto.local = shm: auto not usable",
              not auto["usable"] and not auto["local_falls_back"], str(auto))
        check("no shm, transport.auto.local = shm: default transport names the missing shm",
              doc["default_transport"]["usable"] is False
              and "local sub-transport 'shm'" in doc["default_transport"]["reason"],
              str(doc["default_transport"]))
finally:
    os.unlink(cfg_path)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
