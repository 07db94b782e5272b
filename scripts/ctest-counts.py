#!/usr/bin/python3
"""Counts one ctest run from its JUnit file (ctest --output-junit).

Usage: ctest-counts.py JUNIT_XML REGISTERED LABEL
Prints one line: "LABEL: R registered, S selected, N run, P passed, K skipped,
F failed", then the names of skipped tests with ctest's reason and of failed
tests, each failed one with the lines of its output that say why (those
starting with FAIL or naming an error, else its last lines), so that the end
of a CI log, which is often all of it that is kept, names the cause too.
Exit status 0.
"""
import re
import sys
import xml.etree.ElementTree as ET

WHY = re.compile(r"^\s*(FAIL|\[FAIL|.*(error|failed|Error|assert|Assert|Sanitizer|hung|timed out))")


def why_lines(case, most=8, width=300):
    """The lines of a failed test's output that tell why, shortened."""
    out = case.find("system-out")
    text = out.text if out is not None and out.text else ""
    lines = [l for l in text.splitlines() if l.strip()]
    picked = [l for l in lines if WHY.match(l)][:most] or lines[-5:]
    return [l if len(l) <= width else l[:width] + " ..." for l in picked]


path, registered, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    cases = ET.parse(path).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:
    print(f"{label}: no JUnit output ({e}): ctest did not finish")
    sys.exit(0)
selected = passed = skipped = failed = 0
skipped_names = []
failed_names = []
for c in cases:
    selected += 1
    status = c.get("status", "")
    if status == "run":
        passed += 1
    elif status in ("notrun", "disabled") or c.find("skipped") is not None:
        skipped += 1
        s = c.find("skipped")
        skipped_names.append(f"{c.get('name')} ({s.get('message') if s is not None else status})")
    else:
        failed += 1
        failed_names.append((c.get("name"), why_lines(c)))
run = passed + failed
print(f"{label}: {registered} registered, {selected} selected, {run} run, {passed} passed, "
      f"{skipped} skipped, {failed} failed")
for n in skipped_names:
    print(f"{label}: skipped: {n}")
for n, why in failed_names:
    print(f"{label}: failed: {n}")
    for line in why:
        print(f"{label}:     {line}")
