#!/usr/bin/env bash
# Build the queuecore wheel, install it into a brand-new virtualenv (with pytest and pytest-asyncio only),
# and run the SDK's tests there: what a customer's `pip install queuecore` gets, nothing from the repo.
#
#   sdk/scripts/test_in_clean_venv.sh [pytest args...]
#
# PYTHON picks the interpreter of the clean venv (default: python3), e.g. PYTHON=python3.9 for the oldest
# supported version; EXTRA_REQUIREMENTS adds pins, e.g. "httpx==0.25.2 pydantic==2.5.3" for the oldest
# supported dependencies. The integration tests start the repo's server (.venv/bin/queuecore-server, or
# $QUEUECORE_TEST_SERVER), so run `make install` first. Needs PyPI for httpx, pydantic and pytest.
set -euo pipefail

SDK="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/queuecore-sdk-venv.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

started=$(date +%s)
echo "clean-venv: building the wheel" >&2
"$PYTHON" -m venv "$WORK/build-env"
"$WORK/build-env/bin/python" -m pip install -q --upgrade pip
# Build from a copy: setuptools leaves build/ and *.egg-info next to the sources it builds.
mkdir "$WORK/source"
cp -r "$SDK/pyproject.toml" "$SDK/README.md" "$SDK/src" "$WORK/source/"
rm -rf "$WORK"/source/src/*.egg-info
"$WORK/build-env/bin/python" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/source"
wheel=("$WORK"/dist/queuecore-*.whl)

echo "clean-venv: installing $(basename "${wheel[0]}") into a new venv ($("$PYTHON" --version))" >&2
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --upgrade pip
# shellcheck disable=SC2086  # EXTRA_REQUIREMENTS is a list of requirement words
"$WORK/venv/bin/python" -m pip install -q "${wheel[0]}" "pytest>=8" "pytest-asyncio>=0.24" ${EXTRA_REQUIREMENTS:-}
"$WORK/venv/bin/python" -m pip list 2>/dev/null | grep -i -E '^(httpx|pydantic|pydantic.core|pytest|pytest-asyncio) ' >&2 || true

# The tests run in place; the src layout keeps sdk/src off sys.path, so `import queuecore` is the wheel.
cd "$SDK"
installed=$("$WORK/venv/bin/python" -c 'import queuecore, os; print(os.path.dirname(queuecore.__file__))')
case "$installed" in
  "$WORK/venv/"*) ;;
  *) echo "clean-venv: queuecore was imported from $installed, not the wheel" >&2; exit 1 ;;
esac

echo "clean-venv: running the tests" >&2
status=0
"$WORK/venv/bin/python" -m pytest -q "$SDK/tests" "$@" || status=$?
echo "clean-venv: done in $(( $(date +%s) - started )) s (exit $status)" >&2
exit $status
