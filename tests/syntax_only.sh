#!/bin/sh
# tests/syntax_only.sh — the compiler launcher of PIPETYPE_LIBRARY_TESTS=check: runs the compile
# command it is given with -fsyntax-only (every declaration checked, every template the tests use
# instantiated and every static_assert evaluated, no code generated; the dependency file still
# written), then leaves an empty file where the object would be, so that the build tool sees the
# unit up to date until one of its sources changes.
out=
prev=
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
"$@" -fsyntax-only || exit $?
[ -z "$out" ] || : >"$out"
