#!/bin/sh
# The main job of `make run`: index the bundled sample knowledge base on the
# embedded default (SQLite + in-process Qdrant Edge, no servers), apply a
# change set, sync again, and sync once more with nothing changed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fi=${FRESHINDEX:-freshindex}
demo=${DEMO_DIR:-.freshindex-demo}
question=${QUESTION:-"How do I roll back a database migration, and when must I not?"}

rm -rf "$demo"
mkdir -p "$demo"
cp -R "$here/kb" "$demo/kb"
export FRESHINDEX_DATA_DIR="$demo/data"

step() { printf '\n==== %s ====\n' "$1"; }

step "register the sample knowledge base"
$fi sources add docs --kind folder --location "$demo/kb" --owner platform-team

step "sync 1: full build"
$fi sync docs
step "context for: $question"
$fi query "$question"

step "apply the change set (edit guides/release.md, add guides/faq.md, delete notes/incident-2026-03.txt)"
"$here/apply_changes.sh" "$demo/kb"

step "sync 2: only the changes"
$fi sync docs
step "context for: Who approves a refund above 10,000 USD?"
$fi query "Who approves a refund above 10,000 USD?"

step "sync 3: nothing changed"
$fi sync docs

step "snapshots"
$fi snapshots list
