# Sourced by test scripts that start ranks by hand.
# chorus_free_port prints a free TCP port on 127.0.0.1 (tests/lib/free_port.py
# says how it is chosen).
_chorus_free_port_py="$(dirname "${BASH_SOURCE[0]}")/free_port.py"
chorus_free_port() { /usr/bin/python3 "$_chorus_free_port_py"; }
