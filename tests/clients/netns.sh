#!/bin/bash
# netns.sh SCRIPT [ARGS...] : run a bash SCRIPT in a fresh network namespace that has only
# loopback (as root: unshare -n). Whatever the script starts (daemon, stub, clients) lives and
# dies in that namespace; nothing in it can reach any other address.
# The clients run as a user's would: CI's own `CI=true` is not passed on to them.
exec unshare -n env -u CI sh -c 'ip link set lo up && exec bash "$@"' netns "$@"
