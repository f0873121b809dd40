#!/usr/bin/env bash
# The example tools against paths that are not plain files (docs/03 §3.8): what they write to and
# what they read. Usage: hostile_paths.sh EXPLORE TRAIN_MLP GPT
# Each check runs its tool under `timeout` (a FIFO must never hang a tool) and states what must
# hold; the script ends with "N passed, N failed" and fails when any check did.
set -uo pipefail
explore=$1 train=$2 gpt=$3
work=$(mktemp -d)
reader=""
trap 'kill $reader 2>/dev/null; rm -rf "$work"' EXIT
passed=0 failed=0
check() {  # check NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); echo "ok - $name"; else failed=$((failed + 1)); echo "not ok - $name"; fi
}
# run RC REGEX TOOL ARGS...: the tool exits RC within 20 s and its stderr matches REGEX
run() {
  local want=$1 regex=$2
  shift 2
  timeout 20 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ "$rc" -eq "$want" ] && grep -Eq -- "$regex" "$work/err" ||
    { echo "  rc $rc (want $want); stderr: $(head -c 400 "$work/err")"; return 1; }
}
small=(--schedule 1f1b --ranks 2 --microbatches 2)

# --- outputs -------------------------------------------------------------------------------
mkfifo "$work/fifo"
# a character device of our own (the same as /dev/null: 1, 3), so that a tool that replaced it
# would not break /dev/null for everything after it
if mknod -m 666 "$work/null" c 1 3 2>/dev/null; then
  check "explore --svg to a character device writes through and leaves the device" \
    bash -c "timeout 20 '$explore' ${small[*]} --svg '$work/null' >/dev/null && [ -c '$work/null' ]"
  check "explore --output to a character device leaves the device" \
    bash -c "timeout 20 '$explore' ${small[*]} --output '$work/null' && [ -c '$work/null' ]"
  check "train_mlp --svg to a character device leaves the device" \
    bash -c "timeout 60 '$train' --steps 1 --svg '$work/null' >/dev/null && [ -c '$work/null' ]"
else
  echo "(not root: no device node of our own, so the character-device checks did not run)"
fi
check "explore --svg to a FIFO nobody reads is refused at once" \
  run 2 "cannot write $work/fifo: a FIFO that nobody reads" "$explore" "${small[@]}" --svg "$work/fifo"
cat "$work/fifo" >"$work/from_fifo" &
reader=$!
sleep 0.2
check "explore --svg to a FIFO with a reader writes through it" \
  bash -c "timeout 20 '$explore' ${small[*]} --svg '$work/fifo' >/dev/null && wait_for() { for _ in \$(seq 50); do grep -q '</svg>' '$work/from_fifo' && return 0; sleep 0.1; done; return 1; }; wait_for && [ -p '$work/fifo' ]"
wait $reader 2>/dev/null
reader=""
touch "$work/target.svg"
ln -s "$work/target.svg" "$work/link.svg"
check "explore --svg over a symbolic link writes its file and keeps the link" \
  bash -c "timeout 20 '$explore' ${small[*]} --svg '$work/link.svg' >/dev/null && [ -L '$work/link.svg' ] && grep -q '</svg>' '$work/target.svg'"
ln -s "$work/nothing/here.svg" "$work/dangling.svg"
check "explore --svg over a link to nothing is refused" \
  run 2 "cannot write $work/dangling.svg: a symbolic link to nothing" "$explore" "${small[@]}" --svg "$work/dangling.svg"
mkdir "$work/dir"
check "explore --output to a directory is refused" \
  run 2 "--output: cannot write $work/dir: it is a directory" "$explore" "${small[@]}" --output "$work/dir"
check "explore --trace to a directory is refused, and --output leaves no partial file" \
  bash -c "timeout 20 '$explore' ${small[*]} --output '$work/o.txt' --trace '$work/dir' 2>/dev/null; [ \$? -eq 2 ] && [ -z \"\$(ls '$work' | grep '^o.txt')\" ]"
if [ -w /dev/full ]; then
  check "explore exits 2 when standard output cannot be written" \
    bash -c "timeout 20 '$explore' ${small[*]} >/dev/full 2>'$work/err'; [ \$? -eq 2 ] && grep -q 'cannot write standard output' '$work/err'"
  check "train_mlp exits 2 when standard output cannot be written" \
    bash -c "timeout 60 '$train' --steps 1 >/dev/full 2>'$work/err'; [ \$? -eq 2 ] && grep -q 'cannot write standard output' '$work/err'"
fi
mkdir -p "$work/dump"
touch "$work/dump/weights"  # a file where --dump makes a folder
gpt_small=(--layers 2 --heads 2 --width 16 --seq 12 --rows 2 --ranks 2 --microbatches 2 --steps 1)
check "gpt --dump that cannot write says which and never 'dump written'" \
  bash -c "timeout 60 '$gpt' ${gpt_small[*]} --dump '$work/dump' >'$work/out' 2>'$work/err'; [ \$? -eq 2 ] && grep -q -- '--dump $work/dump' '$work/err' && ! grep -q 'dump written' '$work/out'"

# --- inputs --------------------------------------------------------------------------------
check "explore --file FIFO is refused, not waited on" \
  run 2 "cannot read $work/fifo: it is a FIFO" "$explore" --file "$work/fifo"
check "explore --file directory is refused" run 2 "cannot read $work/dir: it is a directory" "$explore" --file "$work/dir"
check "explore --file /dev/zero is refused" run 2 "cannot read /dev/zero: it is not a regular file" "$explore" --file /dev/zero
truncate -s 65M "$work/huge.txt"
check "explore --file of 65 MiB is refused by its size" \
  run 2 "$work/huge.txt is larger than 64 MiB \\(pipetype::limits::file_bytes\\)" "$explore" --file "$work/huge.txt"
check "train_mlp --file FIFO is refused" run 2 "cannot read $work/fifo: it is a FIFO" "$train" --file "$work/fifo"
mkdir "$work/corpus"
echo "# some text that is long enough to draw windows from, and then some more of it" >"$work/corpus/a.md"
mkfifo "$work/corpus/b.md"
check "gpt --corpus with a FIFO among its .md files is refused" \
  run 2 "--corpus $work/corpus: b.md is not a regular file" "$gpt" "${gpt_small[@]}" --corpus "$work/corpus"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
