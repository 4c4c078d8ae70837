"""The programs that run inside a code worker process (Python and Node.js).

Each reads ``{"code", "context"}`` as JSON on stdin, defines the task code in a fresh
namespace, calls ``run(context)`` and writes ONE JSON document on the result fd named by its
first argument, then exits at once. Trusted server-side code only: this is not a sandbox.
"""

from __future__ import annotations

# The Python child. It reads {"code", "context"} on stdin and writes ONE JSON document on the
# result fd named by argv[1]. The result travels on its own pipe, not on stdout, so that
# whatever the user code prints (even a line that looks like a result) cannot corrupt it.
PYTHON_BOOTSTRAP = r"""
import json, linecache, os, sys, traceback

FILENAME = "<task code>"


def _send(fd, document):
    with os.fdopen(fd, "wb") as channel:
        channel.write(json.dumps(document).encode("utf-8"))


def _failure(exc):
    # Drop the bootstrap's own frames: the first frame worth showing is the task code's.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    return {"ok": False, "kind": "exception", "error": (type(exc).__name__ + ": " + str(exc)).strip(),
            "traceback": "".join(lines)}


def _main():
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)  # processes the code spawns must not hold the result pipe open
    payload = json.loads(sys.stdin.buffer.read())
    code = payload["code"]
    # Registering the source lets tracebacks show the offending lines of the task code.
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    namespace = {"__name__": "__task__", "__builtins__": __builtins__}
    try:
        exec(compile(code, FILENAME, "exec"), namespace)
        run = namespace.get("run")
        if not callable(run):
            document = {"ok": False, "kind": "no_run", "error": "the code defines no run(context) function"}
        else:
            value = run(payload["context"])
            try:
                json.dumps(value, allow_nan=False)  # refuse here what the scheduler could not store
                document = {"ok": True, "value": value}
            except (TypeError, ValueError, RecursionError) as exc:
                document = {"ok": False, "kind": "not_json", "error": type(exc).__name__ + ": " + str(exc)}
    except Exception as exc:
        document = _failure(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # os._exit below would drop buffered output
        except Exception:
            pass  # the code closed or replaced the stream: its output is its own business
    _send(fd, document)
    # The attempt is over once run() returned: do not wait for threads the code left behind.
    os._exit(0)


_main()
"""

# The JavaScript child: same protocol. `new Function` gives the code a CommonJS-like scope
# (module, exports, require, __filename, __dirname -- the same parameters `node --check`
# compiles a .cjs file with), so both `function run` and `module.exports.run` styles work.
JS_BOOTSTRAP = r"""
'use strict';
const fs = require('fs');
const fd = Number(process.argv[1]);
const FILENAME = '<task code>';
const SOURCE_URL = 'hai-task-code';  // V8 ignores a sourceURL with spaces or brackets; renamed in stacks
const HEADER_LINES = 2;  // `new Function` puts two lines before the body

function send(document) {
  const buffer = Buffer.from(JSON.stringify(document), 'utf8');
  let offset = 0;
  while (offset < buffer.length) offset += fs.writeSync(fd, buffer, offset, buffer.length - offset);
  fs.closeSync(fd);
  process.exit(0);  // the attempt is over: timers and handles the code left behind do not matter
}

function describe(error) {
  if (!(error instanceof Error)) return { message: 'thrown value: ' + String(error), stack: '' };
  // Keep only the task code's frames, with line numbers relative to the code as written.
  const stack = String(error.stack || '').split('\n')
    .filter((line) => line.trim().startsWith('at ') && !line.includes('[eval]') && !line.includes('node:internal'))
    .map((line) => line.replace(new RegExp(SOURCE_URL + ':(\\d+):(\\d+)', 'g'),
      (_, row, col) => FILENAME + ':' + (Number(row) - HEADER_LINES) + ':' + col))
    .join('\n');
  return { message: error.name + ': ' + error.message, stack };
}

function fail(error) {
  const { message, stack } = describe(error);
  send({ ok: false, kind: 'exception', error: message, traceback: stack });
}

function succeed(value) {
  let text;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (error) {
    send({ ok: false, kind: 'not_json', error: describe(error).message });
    return;
  }
  send({ ok: true, value: JSON.parse(text === undefined ? 'null' : text) });
}

function main() {
  const payload = JSON.parse(fs.readFileSync(0, 'utf8'));
  const module = { exports: {} };
  const exportsObject = module.exports;
  let run;
  try {
    const body = payload.code + '\n;return typeof run === "function" ? run : undefined;\n//# sourceURL=' + SOURCE_URL;
    const factory = new Function('module', 'exports', 'require', '__filename', '__dirname', body);
    const declared = factory(module, exportsObject, require, FILENAME, process.cwd());
    const exported = module.exports && module.exports.run;
    run = [exported, exportsObject.run, declared].find((candidate) => typeof candidate === 'function');
  } catch (error) {
    fail(error);
    return;
  }
  if (run === undefined) {
    send({ ok: false, kind: 'no_run', error: 'the code defines no run(context) function' });
    return;
  }
  let pending;
  try {
    pending = Promise.resolve(run(payload.context));
  } catch (error) {
    fail(error);
    return;
  }
  pending.then(succeed, fail);
}

main();
"""
