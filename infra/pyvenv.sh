# infra/pyvenv.sh — sourced (not run) by the scripts that drive a pinned
# Python tool (fuzz-api.sh, a2a-sdk.sh): each tool gets a virtualenv of its
# own under .local/, so that no other tool's pins can move its packages (pip
# only warns about an installed package's broken pins).

# pyvenv_install LABEL VENV REQUIREMENTS NAMES makes VENV a virtualenv holding
# REQUIREMENTS (a pip requirements file, every package pinned, so that a new
# release cannot turn CI red overnight), once: a stamp named after the file's
# checksum marks a finished install, so later runs reuse it and a changed list
# (or an install cut short) starts again from an empty virtualenv. NAMES, a
# |-separated list of package names, says which pins the progress line shows;
# pip's output goes to VENV-install.log. It exits the calling script on
# failure.
pyvenv_install() {
  local label=$1 venv=$2 requirements=$3 names=$4
  local stamp log="$venv-install.log"
  stamp="$venv/.installed-$(cksum <"$requirements" | cut -d" " -f1)"

  command -v python3 >/dev/null || { echo "python3 not found: install python3 and python3-venv" >&2; exit 1; }

  mkdir -p "$(dirname "$venv")"
  [[ -f $stamp ]] && return 0
  echo "$label: installing $(grep -E "^($names)==" "$requirements" | paste -sd' ') into $venv (first run only)…"
  rm -rf "$venv"
  python3 -m venv "$venv" || { echo "cannot create a virtualenv: install python3-venv" >&2; exit 1; }
  timeout --kill-after=10 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >"$log" 2>&1 \
    || { echo "pip install failed or took over 15 minutes: $(tail -2 "$log" | tr '\n' ' ')" >&2; exit 1; }
  touch "$stamp"
}
