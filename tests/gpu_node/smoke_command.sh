#!/bin/sh
# Run on a real GPU node (not in CI): builds tests/gpu_node/vector_add.cu as /cuda-samples/vectorAdd (where the
# smoke test's image keeps NVIDIA's sample) and runs the smoke test's own command, read from gpus/smoketest.py,
# exactly as its pod would. Writes the log and the exit code to $1 (default ./smoke-check).
set -u
out=${1:-smoke-check}
mkdir -p "$out" /cuda-samples
here=$(cd "$(dirname "$0")" && pwd)
nvcc -O2 -o /cuda-samples/vectorAdd "$here/vector_add.cu" || exit 2
command=$(python3 - "$here/../../gpus/smoketest.py" <<'PY'
import ast, shlex, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMMAND":
        print(shlex.join(ast.literal_eval(node.value)))
PY
)
echo "smoke test command: $command" > "$out/smoke.log"
eval "$command" >> "$out/smoke.log" 2>&1
code=$?
echo "exit $code" >> "$out/smoke.log"
echo "$code" > "$out/smoke.exit"
cat "$out/smoke.log"
exit $code
