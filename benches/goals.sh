# Sourced by the benchmark scripts: ratios and the goals table printed at
# their end (one row per figure, met or MISSED).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "inf"; else printf "%.2f", a / b }'; }

goals=()
# goal FIGURE MEASURED VALUE le|ge TARGET TARGET_TEXT: records a row.
goal() {
  local verdict
  verdict=$(awk -v v="$3" -v op="$4" -v g="$5" \
    'BEGIN { ok = (op == "le") ? (v + 0 <= g + 0) : (v + 0 >= g + 0); print ok ? "met" : "MISSED" }')
  goals+=("$(printf '%-58s %-44s %-14s %s' "$1" "$2" "$6" "$verdict")")
}
