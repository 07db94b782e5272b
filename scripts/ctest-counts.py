#!/usr/bin/python3
"""Counts one ctest run from its JUnit file (ctest --output-junit).

Usage: ctest-counts.py JUNIT_XML REGISTERED LABEL
Prints one line: "LABEL: R registered, S selected, N run, P passed, K skipped,
F failed", then the names of skipped tests with ctest's reason and of failed
tests (so that the end of a CI log names them). Exit status 0.
"""
import sys
import xml.etree.ElementTree as ET

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
        failed_names.append(c.get("name"))
run = passed + failed
print(f"{label}: {registered} registered, {selected} selected, {run} run, {passed} passed, "
      f"{skipped} skipped, {failed} failed")
for n in skipped_names:
    print(f"{label}: skipped: {n}")
for n in failed_names:
    print(f"{label}: failed: {n}")
