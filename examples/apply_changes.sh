#!/bin/sh
# Apply the bundled change set to a copy of the sample knowledge base:
# one file edited, one added (copied from changes/edit and changes/add),
# one deleted (listed in changes/delete.txt).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: apply_changes.sh KB_FOLDER}
cp -R "$here/changes/edit/." "$target/"
cp -R "$here/changes/add/." "$target/"
while IFS= read -r path; do
  [ -n "$path" ] && rm -f "$target/$path"
done < "$here/changes/delete.txt"
