#!/usr/bin/env bash
# Print the Debian mirror this host's apt uses (the first "deb" source carrying the main
# archive: a suite without -security), read from /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list (one-line format) and *.sources (deb822 format).
# The images are bootstrapped from it, so no mirror host name is written into the project.
#   docker/host-mirror.sh [SUITE]      # SUITE defaults to bookworm
set -euo pipefail
suite=${1:-bookworm}
APT_DIR=${APT_DIR:-/etc/apt}

one_line() {  # deb [opts] URI SUITE COMPONENTS...
  sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$@" 2>/dev/null \
    | awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }'
}

deb822() {  # stanzas separated by blank lines; Types, URIs, Suites, Enabled fields
  awk -v s="$suite" '
    FNR == 1 { flush() }
    function flush() {
      if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " s " ")) {
        split(uris, u, " "); print u[1]; found = 1; exit
      }
      types = uris = suites = enabled = ""
    }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { flush(); next }
    { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
      if (key == "types") types = $0; else if (key == "uris") uris = $0
      else if (key == "suites") suites = $0; else if (key == "enabled") enabled = tolower($0) }
    END { if (!found) flush() }
  ' "$@" 2>/dev/null | head -n1
}

shopt -s nullglob
lists=("$APT_DIR"/sources.list "$APT_DIR"/sources.list.d/*.list)
stanzas=("$APT_DIR"/sources.list.d/*.sources)
mirror=$(one_line "${lists[@]}" </dev/null || true)
[[ -n $mirror || ${#stanzas[@]} -eq 0 ]] || mirror=$(deb822 "${stanzas[@]}" || true)
if [[ -z $mirror ]]; then
  echo "host-mirror.sh: no 'deb' source for $suite in $APT_DIR/sources.list(.d)" >&2
  exit 1
fi
echo "${mirror%/}"
