"""The few pytest features tests/python uses, for Pythons without pytest (the GPU machine's):
fixture (module scope, by argument name; tmp_path_factory built in), mark.parametrize, raises
(match, .value), skip.  `python3 tests/python/test_strata.py [-k 'a or b']` runs the module's
tests through main() and prints pytest's closing line ("N passed, N skipped, N failed").
"""
import contextlib
import re
import sys
import tempfile
import traceback


class Skipped(Exception):
    pass


class _Raises:
    def __init__(self):
        self.value = None


class _Mark:
    @staticmethod
    def parametrize(name, values):
        def deco(f):
            f._params = (name, list(values))
            return f
        return deco


class pytest:  # noqa: N801 (stands in for the module)
    mark = _Mark()

    @staticmethod
    def fixture(scope="function"):
        def deco(f):
            f._fixture = True
            return f
        return deco

    @staticmethod
    def skip(reason=""):
        raise Skipped(reason)

    @staticmethod
    @contextlib.contextmanager
    def raises(exc, match=None):
        info = _Raises()
        try:
            yield info
        except exc as e:
            info.value = e
            if match and not re.search(match, str(e)):
                raise AssertionError("%r does not match %r" % (str(e), match))
            return
        raise AssertionError("%s not raised" % exc.__name__)


class _TmpFactory:
    def __init__(self):
        self.dirs = []

    def mktemp(self, name):
        d = tempfile.mkdtemp(prefix=name)
        self.dirs.append(d)
        return d


def main(ns, argv):
    want = []
    if len(argv) >= 2 and argv[0] == "-k":
        want = [w.strip() for w in argv[1].split(" or ")]
    cache = {"tmp_path_factory": _TmpFactory()}

    def resolve(name):
        if name not in cache:
            f = ns[name]
            cache[name] = f(*[resolve(a) for a in f.__code__.co_varnames[:f.__code__.co_argcount]])
        return cache[name]

    passed = failed = skipped = 0
    for name, f in list(ns.items()):
        if not name.startswith("test_") or not callable(f) or getattr(f, "_fixture", False):
            continue
        if want and not any(w in name for w in want):
            continue
        cases = [({}, name)]
        if hasattr(f, "_params"):
            p, vals = f._params
            cases = [({p: v}, "%s[%s]" % (name, v)) for v in vals]
        for extra, label in cases:
            args = f.__code__.co_varnames[:f.__code__.co_argcount]
            try:
                f(*[extra[a] if a in extra else resolve(a) for a in args])
                passed += 1
                print("PASSED %s" % label, flush=True)
            except Skipped as e:
                skipped += 1
                print("SKIPPED %s: %s" % (label, e), flush=True)
            except Exception:
                failed += 1
                print("FAILED %s\n%s" % (label, traceback.format_exc()), flush=True)
    print("%d passed, %d skipped, %d failed" % (passed, skipped, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit("run a test module instead: python3 tests/python/test_strata.py")
