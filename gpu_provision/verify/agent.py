"""The verification agent kept on each node by content digest, so that a run sends a short command, not the agent.

The agent is the node bundle's ``verify`` entry (:func:`gpu_provision.bundle.build`, a few hundred kilobytes with
NVIDIA's ``pynvml``). Sending it on every run would make verification cost grow with the agent's size times the
fleet. Instead the node keeps one copy per version, named by the digest of its bytes, in :data:`AGENT_CACHE`
(root's alone, mode 0700), as the probe's modules are kept (:data:`gpu_provision.bundle.PROBE_CACHE`):

* :func:`run_command` is what every run sends: a ``python3 -c`` loader of about a kilobyte plus the node's
  expectations. It checks that the cache directory is still root's alone (owner root, no group or other bits)
  and holds this digest's copy; if not it prints :data:`CACHE_MISS` and exits 0. Otherwise it removes other
  versions' copies (the one place that does, whichever way the copy came: the installer below or the pyinfra
  stage, :func:`gpu_provision.stages.verify.verify`, which writes it as a file). The first run on a node's
  interpreter keeps beside the copy a compiled one for it (``<digest>.<cache tag>.pyz``: each module's source
  and its bytecode as an unchecked hash-based ``.pyc``, PEP 552), and later runs import from that: importing
  from a zip of sources compiles every module on every run, which was half of the agent's own CPU time. The
  cache tag in the name keeps each interpreter to its own compiled copy; bytecode in it that the interpreter
  cannot use (a magic number of another build) is passed over by the import system for the source beside it.
  The compiled copy is written to a ``.compiled-*.pyz`` temporary file first, so one a killed run left behind
  is pruned with the other versions by the next run. Then it writes the
  expectations into a fresh private run directory inside the cache (``mkdtemp``: mode 0700, an unpredictable
  name), runs the agent from the copy in the same process (its own temporary files, such as the pod manifest it
  hands kubectl, go to that directory too), prints its report and removes the run directory, unless asked to
  keep it (then the report is saved beside the expectations and the directory named on stderr). An agent that
  ends without a report (an exit status above 2, or an exception: 3) ends the command with that status, so the
  run's failure names the command, the status and the last lines it printed.
* :func:`install_command` is sent only after a miss: the agent's bytes on the command's standard input, written
  to a same-directory temporary file from ``mktemp``, checked against the digest, renamed into place (the run
  that follows removes older versions' copies). It refuses a cache path that is a symbolic link or not a
  directory.

Nothing is written under ``/tmp``, ``/var/tmp`` or ``/dev/shm``. The commands run with the host's connector
arguments (``_sudo`` and the rest), so a non-root login still runs them as root.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from functools import cache

from gpu_provision import bundle

#: Where nodes keep the agent by digest (root's alone, mode 0700); per-run directories live inside it too.
AGENT_CACHE = "/var/lib/gpu-provision/agent"
#: What :func:`run_command` prints (and exits 0) when the node has no usable copy of this version.
CACHE_MISS = {"gpu-provision-agent-cache": "miss"}

# Runs on the node's python3 (3.9+) as bundle.PROBE_PYTHON starts it (isolated, without site: the agent needs only
# the standard library and what its archive carries). argv: expectations (base64), then extra agent arguments. The
# run's private directory is made with os.mkdir (mode 0700, a random name, refused if it exists, as mkdtemp makes it)
# and removed with a walk of its own: tempfile and shutil cost a run more to import than the work they did here.
_RUN_LOADER = """\
import base64,io,os,sys
R={cache!r}
A=R+'/{digest}.pyz'
try:
    s=os.lstat(R);ok=s.st_uid==0 and s.st_mode&0o170077==0o040000 and os.path.isfile(A)
except OSError:
    ok=0
if not ok:
    print({miss!r});sys.exit(0)
for n in os.listdir(R):
    if n.endswith('.pyz') and not n.startswith('{digest}.'):
        try:
            os.remove(R+'/'+n)
        except OSError:
            pass
T=sys.implementation.cache_tag
C=R+'/{digest}.'+str(T)+'.pyz'
if T and not os.path.isfile(C):
    try:
        import importlib.util as u,marshal,zipfile
        t=R+'/.compiled-'+os.urandom(8).hex()+'.pyz';os.close(os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600))
        with zipfile.ZipFile(A) as z,zipfile.ZipFile(t,'w') as o:
            for i in z.infolist():
                b=z.read(i);o.writestr(i,b)
                if i.filename.endswith('.py'):
                    o.writestr(i.filename+'c',u.MAGIC_NUMBER+(1).to_bytes(4,'little')+u.source_hash(b)+marshal.dumps(
                        compile(b,C+'/'+i.filename,'exec',dont_inherit=True)),i.compress_type)
        os.replace(t,C)
    except Exception:
        try:
            os.remove(t)
        except Exception:
            pass
if T and os.path.isfile(C):
    A=C
while 1:
    d=R+'/run-'+os.urandom(6).hex()
    try:
        os.mkdir(d,0o700);break
    except FileExistsError:
        pass
os.environ['TMPDIR']=d
r=3
out=io.StringIO()
real=sys.stdout
try:
    e=d+'/expect.json'
    with open(e,'wb') as f:
        f.write(base64.b64decode(sys.argv[1]))
    sys.path.insert(0,A)
    from {package}.__main__ import main
    sys.stdout=out
    try:
        r=main(['verify','--expect',e]+sys.argv[2:])
    except SystemExit as x:
        r=x.code
    except Exception:
        import traceback;traceback.print_exc()
finally:
    sys.stdout=real
    real.write(out.getvalue())
    if {keep}:
        with open(d+'/report.json','w') as f:
            f.write(out.getvalue())
        sys.stderr.write('gpu-provision: run files kept in '+d+'\\n')
    else:
        for w,ds,fs in os.walk(d,topdown=False):
            for n in fs+ds:
                try:
                    (os.rmdir if os.path.isdir(w+'/'+n) and not os.path.islink(w+'/'+n) else os.remove)(w+'/'+n)
                except OSError:
                    pass
        try:
            os.rmdir(d)
        except OSError:
            pass
if not isinstance(r,int) and r is not None:
    sys.stderr.write(str(r)+'\\n');r=3
if (r or 0)>2:
    sys.exit(r)
"""

_INSTALL = """\
set -e
c={cache}
umask 022
mkdir -p "$(dirname "$c")"
umask 077
if [ -L "$c" ] || {{ [ -e "$c" ] && [ ! -d "$c" ]; }}; then
  cat >/dev/null; echo "gpu-provision: $c is not a directory" >&2; exit 1
fi
mkdir -p "$c"
chown root:root "$c"
chmod 0700 "$c"
t=
trap '[ -z "$t" ] || rm -f "$t"' EXIT
trap 'exit 1' HUP INT TERM PIPE
t=$(mktemp "$c/.agent.XXXXXXXX")
base64 -d > "$t"
if [ "$(sha256sum < "$t")" != "{sha256}  -" ]; then echo "gpu-provision: incomplete upload of the agent" >&2; exit 1; fi
chmod 0600 "$t"
mv -f "$t" "$c/{digest}.pyz"
t=
"""


@cache
def agent_digest() -> str:
    """The digest naming this version of the agent on nodes (of the node bundle's bytes)."""
    return hashlib.sha256(bundle.build()).hexdigest()[:32]


def run_command(expectations: str, keep: bool = False, cache_dir: str = AGENT_CACHE) -> str:
    """The short command that runs the node's copy of the agent on ``expectations`` (JSON text) and prints its
    report, or prints :data:`CACHE_MISS` where the node has no usable copy. ``keep`` leaves the run's
    expectations and report on the node (in a private directory under ``cache_dir``, named on stderr)."""
    loader = _RUN_LOADER.format(cache=cache_dir, digest=agent_digest(), miss=json.dumps(CACHE_MISS),
                                package=bundle.PACKAGE, keep="1" if keep else "0")
    encoded = base64.b64encode(expectations.encode()).decode()
    return f"{bundle.PROBE_PYTHON} -c {shlex.quote(loader)} {encoded} --compact"


def install_command(cache_dir: str = AGENT_CACHE) -> tuple[str, str]:
    """The command that keeps this version of the agent under ``cache_dir`` and its standard input (the agent's
    bytes, base64), as a pair; sent only after :func:`run_command` reported a miss."""
    data = bundle.build()
    script = _INSTALL.format(cache=shlex.quote(cache_dir), sha256=hashlib.sha256(data).hexdigest(),
                             digest=agent_digest())
    return script, base64.encodebytes(data).decode()


def is_miss(stdout: str) -> bool:
    """Whether a run's output is the node saying it has no usable copy of this version."""
    return stdout.strip() == json.dumps(CACHE_MISS)
