"""Isolated environments for ``harness matrix`` / ``harness bisect``, layered over THIS interpreter.

An environment is a venv made with ``--system-site-packages --without-pip`` (no pip copy: the
outer pip installs into it with ``pip --python``), so everything the current interpreter has —
torch above all — stays visible, and only what the requirements add lives in the env:

1. ``pip install --no-deps --ignore-installed REQS``: the requested packages themselves, exactly,
   inside the env even when another release of the same name is visible outside it (a pin to the
   very release this interpreter has, ``torch==2.13.0`` over torch 2.13.0, installs nothing: a
   copy would run the same code);
2. ``pip install REQS``: only the dependencies the current interpreter lacks (pip sees the outer
   packages, PYTHONPATH included, as installed).

Runs put the env's site-packages FIRST on PYTHONPATH, ahead of folders already there (a GPU
machine that carries libraries in a PYTHONPATH folder). Sources: the registry, or offline a
wheelhouse folder (``--no-index --find-links DIR``). Environments are cached under a folder named
by the hash of their requirements and the interpreter; a build goes into a temporary folder that
is renamed into place only once it is complete, so a failed build leaves nothing half-made.

After the install every module the env ships (its top-level packages and their first level) must
import from the env. A top-level folder without ``__init__.py`` (a namespace portion, as
flash-attn-4's ``flash_attn/cute``) loses to a regular package of the same name found later on
the path (FA2's ``flash_attn/``); the env then gets a bridge ``__init__.py`` that runs the outer
package's ``__init__`` with the env's folder first in ``__path__``: the env's subpackages win,
the outer package's others still import.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_FILE = "env.json"  # written last: its presence marks a complete environment
DEFAULT_CACHE = Path.home() / ".cache" / "attn-harness" / "envs"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_BRIDGE_MARK = "# bridge written by harness matrix"


class EnvError(Exception):
    """An environment that cannot be built or used: one line for the user, exit 2."""


@dataclass(frozen=True)
class EnvSpec:
    name: str
    requirements: tuple[str, ...]


@dataclass
class BuiltEnv:
    spec: EnvSpec
    path: Path
    site: Path
    python: Path
    versions: dict[str, Any] = field(default_factory=dict)
    reused: bool = False

    def run_environ(self) -> dict[str, str]:
        """os.environ for a process that runs in this env: its site first on PYTHONPATH, then the
        project this harness is imported from (same harness code in every env), then the rest."""
        return run_environ(self.site)

    def record(self) -> dict[str, Any]:
        """What run.json and rows say about the environment."""
        return {"name": self.spec.name, "requirements": list(self.spec.requirements),
                "versions": {**self.versions.get("requested", {}), "torch": self.versions.get("torch")},
                "packages": self.versions.get("packages", {}), "path": str(self.path)}


def parse_env_arg(text: str) -> EnvSpec:
    """``NAME=REQ [REQ ...]`` (requirements separated by spaces, as on a pip command line)."""
    name, sep, reqs = text.partition("=")
    name = name.strip()
    if not sep or not _NAME_RE.fullmatch(name):
        raise EnvError(f"--env {text!r}: expected NAME=REQUIREMENTS, e.g. new=\"flashinfer-python==0.7.4\" "
                       "(NAME: letters, digits, '.', '_', '-')")
    try:
        parts = tuple(shlex.split(reqs))
    except ValueError as e:
        raise EnvError(f"--env {text!r}: {e}") from None
    if not parts:
        raise EnvError(f"--env {text!r}: no requirements after {name}=")
    return EnvSpec(name, parts)


def env_key(spec: EnvSpec) -> str:
    """The cache folder's name: requirements (order-free) and the interpreter they layer over."""
    h = hashlib.sha256(json.dumps({"requirements": sorted(spec.requirements), "python": sys.version,
                                   "executable": os.path.realpath(sys.executable)}).encode())
    return h.hexdigest()[:16]


def project_root() -> Path:
    return Path(__file__).resolve().parents[3]


def run_environ(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    parts = [str(site), str(project_root())] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def _site_dir(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_version(name: str) -> str | None:
    """The release of ``name`` this interpreter imports (importlib.metadata), or None."""
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def parse_requirement(text: str) -> Any:
    """A ``packaging`` Requirement, or None for what is not one (a path or URL to a wheel other
    than a wheel file name, a pip flag): such entries are only checked after the build."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if text.startswith("-"):
        return None
    try:
        return Requirement(text)
    except InvalidRequirement:
        pass
    if text.endswith(".whl"):
        try:
            name, version, _, _ = parse_wheel_filename(Path(text).name)
        except InvalidWheelFilename:
            return None
        return Requirement(f"{name}=={version}")
    return None


def pinned_to_installed(req: Any) -> bool:
    """``NAME==V`` where this interpreter already has release V of NAME (no extras, no URL)."""
    if req is None or req.extras or req.url or req.marker is not None:
        return False
    specs = list(req.specifier)
    have = installed_version(req.name)
    return (have is not None and len(specs) == 1 and specs[0].operator in ("==", "===")
            and req.specifier.contains(have, prereleases=True))


def torch_request_mismatch(specs: list[EnvSpec]) -> str | None:
    """Before anything is built: None when every env runs this interpreter's torch, as far as the
    requirements say (an env that names no torch, or pins exactly this torch's release); else
    the one-line refusal. A torch that a package pulls in as a dependency is caught after the
    build (``torch_mismatch``)."""
    from packaging.utils import canonicalize_name

    current = installed_version("torch")
    odd = [f"env {s.name} asks for {r}" for s in specs for r in map(parse_requirement, s.requirements)
           if r is not None and canonicalize_name(r.name) == "torch" and not pinned_to_installed(r)]
    if not odd:
        return None
    return (f"{'; '.join(odd)}, while this interpreter runs torch {current}: the environments would run "
            "different torch builds, and timings and results would compare torch as well as the package; "
            "pass --allow-torch-mismatch if that is the point (a torch upgrade check)")


def _requirement_names(reqs: tuple[str, ...]) -> list[str]:
    out = []
    for r in reqs:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
        if m and not r.startswith("-"):
            out.append(m.group(1))
    return out


def pip_failure(output: str, reqs: tuple[str, ...], wheelhouse: Path | None, target: Path | None = None) -> str:
    """pip's failure as one line a user can act on (``target``: the env being built)."""
    where = f"wheelhouse {wheelhouse}" if wheelhouse else "the package index"
    if "No space left on device" in output:  # a torch release with its CUDA libraries is ~5.5 GB
        at = f" under {target.parent}" if target is not None else ""
        return (f"no space left on the disk{at} while installing {' '.join(reqs)}: free some, or build the "
                "environments elsewhere with --env-cache DIR")
    if re.search(r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
                 r"Name or service not known|Network is unreachable|ProxyError|ConnectTimeout|Max retries exceeded",
                 output):
        return ("cannot reach the package index (no network?) and no --wheelhouse was given: download the wheels "
                "where there is network (pip download --no-deps -d DIR REQS) and pass --wheelhouse DIR")
    m = re.search(r"Could not find a version that satisfies the requirement (\S+)(?: \(from versions: ([^)]*)\))?", output)
    if m:
        avail = (m.group(2) or "").strip()
        return (f"{m.group(1)}: no such version, or no wheel for this platform (Python "
                f"{sys.version_info.major}.{sys.version_info.minor}, {sysconfig.get_platform()}), in {where}; "
                + (f"available there: {avail}" if avail and avail != "none" else "none available there"))
    if re.search(r"Failed building wheel|metadata-generation-failed|subprocess-exited-with-error|"
                 r"Failed to build", output):
        last = [ln.strip() for ln in output.splitlines() if ln.strip().lower().startswith("error")]
        return (f"building {' '.join(reqs)} from source failed ({last[-1] if last else 'see pip output'}); "
                "give a version with a wheel for this platform, or a wheelhouse holding one")
    # With a pip constraint file in force (pip.conf, PIP_CONSTRAINT), a release that does not exist
    # is reported as a conflict between the request and the constraint.
    asked = re.findall(r"The user requested (?!\(constraint\))(\S+)", output)
    capped = re.findall(r"The user requested \(constraint\) (\S+)", output)
    def _name(r: str) -> str:
        return re.split(r"[<>=!~;\[(]", r, maxsplit=1)[0].strip().lower()

    if len(asked) == 1 and capped and _name(asked[0]) == _name(capped[0]):
        return (f"{asked[0]}: no such version, or no wheel for this platform (Python {sys.version_info.major}."
                f"{sys.version_info.minor}, {sysconfig.get_platform()}), in {where} within pip's configured "
                f"constraint {capped[0]}")
    if "ResolutionImpossible" in output or "conflicting dependencies" in output:
        return f"pip cannot resolve {' '.join(reqs)} together with what this interpreter has installed (in {where})"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("ERROR")]
    return (errs[-1] if errs else lines[-1] if lines else "pip failed with no output")


def _pip(venv: Path, args: list[str], reqs: tuple[str, ...], wheelhouse: Path | None, what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", str(_python(venv)), "install", "--no-input",
           "--disable-pip-version-check", *args]
    env = dict(os.environ)
    if wheelhouse is not None:
        cmd += ["--no-index", "--find-links", str(wheelhouse)]
        env["PIP_FIND_LINKS"] = str(wheelhouse)  # only the wheelhouse: an offline build uses nothing else
    else:
        cmd += ["--timeout", "20", "--retries", "1"]  # no network: fail in seconds, not in 15 minutes
    try:
        proc = subprocess.run([*cmd, *reqs], capture_output=True, text=True, env=env, timeout=1800)
    except subprocess.TimeoutExpired:
        raise EnvError(f"{what}: pip did not finish in 30 minutes") from None
    if proc.returncode != 0:
        raise EnvError(f"{what}: {pip_failure(proc.stdout + proc.stderr, reqs, wheelhouse, venv)}")


_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, sys
site, names = sys.argv[1], json.loads(sys.argv[2])
real = os.path.realpath(site) + os.sep
own = {d.metadata["Name"]: d.version for d in md.distributions(path=[site])}
requested = {}
for n in names:
    try:
        requested[n] = md.version(n)
    except md.PackageNotFoundError:
        requested[n] = None
try:
    torch = md.version("torch")
except md.PackageNotFoundError:
    torch = None
spec = importlib.util.find_spec("torch")
mods = set()
for d in md.distributions(path=[site]):
    for f in d.files or []:
        p = f.as_posix()
        if ".dist-info/" in p or "__pycache__" in p or p.startswith(".."):
            continue
        if p.endswith(".py") and "/" not in p:
            mods.add(p[:-3])
        elif p.endswith("/__init__.py") and 1 <= p.count("/") <= 2:
            mods.add(p[: -len("/__init__.py")].replace("/", "."))
        top = p.split("/")[0]
        if "/" in p and top.isidentifier() and not os.path.exists(os.path.join(site, top, "__init__.py")):
            mods.add("ns:" + top)
shadowed, bridges = [], {}
for m in sorted(mods):
    if m.startswith("ns:"):  # a namespace portion: a regular package elsewhere would take the name
        top = m[3:]
        try:
            s = importlib.util.find_spec(top)
        except Exception:
            continue
        if s is not None and s.origin and s.origin.endswith("__init__.py") and not os.path.realpath(s.origin).startswith(real):
            bridges[top] = s.origin
        continue
    try:
        s = importlib.util.find_spec(m)
    except Exception:
        continue
    origin = s.origin if s is not None else None
    if s is None:  # the env ships it, yet it does not import: a package outside took the name
        shadowed.append(f"{m} -> not importable")
    elif origin and origin not in ("namespace", "built-in") and not os.path.realpath(origin).startswith(real):
        shadowed.append(f"{m} -> {origin}")
print(json.dumps({"packages": own, "requested": requested, "torch": torch,
                  "torch_path": spec.origin if spec else None, "python": sys.version.split()[0],
                  "shadowed": shadowed, "bridges": bridges}))
"""


_DEPS = r"""
import importlib.metadata as md, sys
from packaging.requirements import Requirement
missing = []
for d in md.distributions(path=[sys.argv[1]]):
    for text in d.requires or []:
        r = Requirement(text)
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        try:
            v = md.version(r.name)
        except md.PackageNotFoundError:
            missing.append(text)
            continue
        if r.specifier and not r.specifier.contains(v, prereleases=True):
            missing.append(text)
print(len(missing))
"""


def _missing_deps(site: Path, python: Path) -> bool:
    """Whether the env's new packages need anything this interpreter lacks (unsure: True)."""
    try:
        proc = subprocess.run([str(python), "-c", _DEPS, str(site)], capture_output=True, text=True,
                              env=run_environ(site), timeout=300)
        return proc.returncode != 0 or proc.stdout.strip() != "0"
    except (OSError, subprocess.SubprocessError):
        return True


def probe(site: Path, python: Path, names: list[str]) -> dict[str, Any]:
    """The env's versions as a run in it sees them (importlib.metadata, inside the env)."""
    proc = subprocess.run([str(python), "-c", _PROBE, str(site), json.dumps(names)], capture_output=True, text=True,
                          env=run_environ(site), timeout=300)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"cannot read the environment's versions: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _write_bridges(site: Path, bridges: dict[str, str]) -> None:
    for top, origin in bridges.items():
        outer = str(Path(origin).parent)
        (site / top / "__init__.py").write_text(
            f"{_BRIDGE_MARK}: this env's {top}/ first, then the package at {outer}\n"
            f"__path__ = [__path__[0], {outer!r}]\n"
            f"with open({origin!r}) as _f:\n"
            f"    exec(compile(_f.read(), {origin!r}, 'exec'))\n", encoding="utf-8")


def _finish(venv: Path, spec: EnvSpec) -> dict[str, Any]:
    site, python, names = _site_dir(venv), _python(venv), _requirement_names(spec.requirements)
    info = probe(site, python, names)
    if info["bridges"]:
        _write_bridges(site, info["bridges"])
        info = probe(site, python, names)
    if info["shadowed"]:
        raise EnvError(f"env {spec.name}: installed modules would import from outside the env: "
                       f"{'; '.join(info['shadowed'][:3])}")
    return info


def build_env(spec: EnvSpec, cache_dir: Path, wheelhouse: Path | None = None) -> BuiltEnv:
    """Build the environment (or reuse the cached one) and read its versions."""
    cache_dir = Path(cache_dir).expanduser()
    final = cache_dir / env_key(spec)
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise EnvError(f"--wheelhouse {wheelhouse}: no such folder")
    if (final / ENV_FILE).exists():
        data = json.loads((final / ENV_FILE).read_text())
        return BuiltEnv(spec, final, _site_dir(final), _python(final), data["versions"], reused=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f"{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(tmp)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise EnvError(f"env {spec.name}: python -m venv failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        site = _site_dir(tmp)
        if sys.prefix != sys.base_prefix:  # this interpreter is a venv itself: its packages are the layer below
            import site as _site

            (site / "_attn_harness_parent.pth").write_text("\n".join(_site.getsitepackages()) + "\n")
        what = f"env {spec.name} ({' '.join(spec.requirements)})"
        todo = tuple(r for r in spec.requirements if not pinned_to_installed(parse_requirement(r)))
        if todo:
            _pip(tmp, ["--no-deps", "--ignore-installed"], todo, wheelhouse, what)
        if todo and _missing_deps(site, _python(tmp)):  # pip's resolver costs seconds: only when something is lacking
            _pip(tmp, [], todo, wheelhouse, what)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same env first
            if not (final / ENV_FILE).exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return build_env(spec, cache_dir, wheelhouse)
        try:
            versions = _finish(final, spec)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        (final / ENV_FILE).write_text(json.dumps({"requirements": list(spec.requirements), "versions": versions},
                                                 indent=2) + "\n")
        return BuiltEnv(spec, final, _site_dir(final), _python(final), versions)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def torch_mismatch(versions: dict[str, dict[str, Any]]) -> str | None:
    """None when every environment runs one torch; else the one-line refusal. ``versions``:
    env name -> its recorded versions (``torch``, ``torch_path``)."""
    seen: dict[tuple[Any, Any], list[str]] = {}
    for name, v in versions.items():
        seen.setdefault((v.get("torch"), v.get("torch_path")), []).append(name)
    if len(seen) <= 1:
        return None
    parts = "; ".join(f"{', '.join(names)}: torch {t} ({p})" for (t, p), names in seen.items())
    return (f"the environments run different torch builds ({parts}): timings and results would compare torch "
            "as well as the package; pass --allow-torch-mismatch if that is the point (a torch upgrade check)")
