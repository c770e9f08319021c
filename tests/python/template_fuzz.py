"""Random templates from the grammar fuselm's renderer supports, with random data, for the
property test that compares fuselm with jinja2 (transformers' environment). Deterministic for a
given seed. Values whose Python printing is an implementation detail (generators, namespace and
loop objects, dict views) are never printed raw: they go through |list, |join or |length first."""
from __future__ import annotations

import random

STRINGS = ["", "a", "Hello", "  padded  ", "x,y,,z", "Ünïcödé ñ", "quote's", 'say "hi"', "<b>&</b>",
           "line1\nline2", "tab\there", "CamelCase word", "123", "-4", "2.5", "日本語"]
NAMES = ["items", "words", "user", "msgs", "n", "m", "s", "t", "flag", "nothing", "missing", "f"]


def random_data(r: random.Random) -> dict:
    return {
        "items": [r.randint(-5, 12) for _ in range(r.randint(1, 5))],
        "words": [r.choice(STRINGS) for _ in range(r.randint(1, 4))],
        "user": {"name": r.choice(STRINGS), "age": r.randint(0, 90), "tags": [r.choice(STRINGS) for _ in range(r.randint(0, 3))],
                 "extra": None if r.random() < 0.5 else {"k": r.randint(0, 3)}},
        "msgs": [{"role": r.choice(["user", "assistant", "system", "tool"]), "content": r.choice(STRINGS)}
                 for _ in range(r.randint(1, 4))],
        "n": r.randint(-3, 20), "m": r.choice([0, 1, 2, 3, 7]), "s": r.choice(STRINGS), "t": r.choice(STRINGS),
        "flag": r.random() < 0.5, "f": r.choice([0.5, 1.0, -2.25, 3.14159, 1e-7, 12345.678, 0.1]),
    }


_C0 = ['upper', 'lower', 'trim', 'title', 'capitalize', 'string', 'e', 'safe', 'center(9)', 'wordcount|string', 'indent(2)', 'indent(2, true)', 'tojson', 'reverse|join', "replace('a', '@')", "trim('x')", "default('dflt')"]
_C1 = ['strip()', 'lstrip()', "rstrip('e ')", 'upper()', 'lower()', 'title()', 'capitalize()', "replace('l', 'L')", "strip('a ')", "split(',')|join('+')", "split()|join('_')", "rsplit(',', 1)|last"]
_C2 = ['1:', ':3', '::-1', '-2:', '1:4:2']
_C3 = ['', "', '", "'|'"]
_C4 = ['', '(indent=2)', '(indent=1)']
_C5 = ['+', '-', '*', '+']
_C6 = ['//', '/', '%']
_C7 = ['abs', 'round', "round(1, 'floor')", 'int', 'float']
_C8 = ['length', 'count', 'wordcount', 'int']
_C9 = ['sum', 'max', 'min', 'first', 'last']
_C10 = ["count('a')", "find('l')"]
_C11 = ['<', '>', '==', '!=', '<=', '>=']
_C12 = ['==', '!=', 'in', 'not in', '<']
_C13 = ['and', 'or']
_C14 = ['', 'not ']
_C15 = ['defined', 'undefined', 'none', 'string', 'number', 'integer', 'float', 'mapping', 'iterable', 'sequence', 'boolean', 'true', 'false', 'callable']
_C16 = ["startswith('H')", "endswith('e')", "startswith(('a', 's'))"]
_C17 = ['', "','", "' '"]
_C18 = ["select('odd')|list", "reject('even')|list", 'sort|list', 'sort(reverse=true)', 'unique|list', 'reverse|list', 'list', "map('string')|list", "map('abs')|list"]
_C19 = ["map('upper')|list", 'sort', 'unique(case_sensitive=true)|list', 'select|list', "reject('string')|list", "map('trim')|list"]
_C20 = ['1:', ':2', '::-1', '::2']
_C21 = ['n % 5', '1, 4', '5, 0, -2', '3']
_C22 = ['dictsort', 'items|list', 'list', 'dictsort(reverse=true)', "dictsort(by='key')"]
_C23 = ['keys()|list', 'values()|list', 'items()|list']
S_TESTS = ["lower", "upper", "eq 'a'", "in ['a', 'Hello']", "string"]
MSG_FILTERS = ["selectattr('role', 'equalto', 'user')|list", "rejectattr('role', 'in', ['tool'])|map(attribute='content')|list",
               "map(attribute='content')|list", "selectattr('content')|list|length|string|list"]


class Gen:
    """Typed expressions (S str, N number, B bool, L list, D dict, A anything) keep most random
    templates meaningful (most render rather than raise), while still hitting errors now and then."""

    def __init__(self, r: random.Random):
        self.r = r
        self.loop_vars: list[str] = []
        self.macros: list[tuple[str, int]] = []
        self.in_loop = 0

    def c(self, options: list) -> str:
        return self.r.choice(options)

    def pick(self, options: list, d: int):
        """A leaf (first entry) at depth 0, else any option; callables are expanded with d-1."""
        k = 0 if d <= 0 else self.r.randrange(len(options))
        out = options[k](d - 1)
        return out if k < 2 else f"({out})"  # composites in parentheses: precedence stays as meant

    def S(self, d: int = 2) -> str:
        r = self.r
        leaf = lambda _: r.choice(["s", "t", "user.name", "words[0]", "msgs[0].content", "msgs[-1]['content']", repr(r.choice(STRINGS))])
        return self.pick([leaf, leaf,
                          lambda e: f"{self.S(e)}|{self.c(_C0)}",
                          lambda e: f"{self.S(e)}.{self.c(_C1)}",
                          lambda e: f"{self.S(e)} ~ {self.A(e)}",
                          lambda e: f"{self.S(e)} + {self.S(e)}",
                          lambda e: f"{self.S(e)}[{self.c(_C2)}]",
                          lambda e: f"{self.L(e)}|join({self.c(_C3)})",
                          lambda e: f"({self.S(e)} if {self.B(e)} else {self.S(e)})",
                          lambda e: f"{self.A(e)}|tojson{self.c(_C4)}",
                          lambda e: f"{self.N(e)}|string",
                          lambda e: f"'{{}} and {{}}'.format({self.A(e)}, {self.A(e)})",
                          lambda e: f"{self.S(e)}|safe + {self.S(e)}",
                          ], d)

    def N(self, d: int = 2) -> str:
        r = self.r
        leaf = lambda _: r.choice(["n", "m", "f", "user.age", "items[0]", "items|length", str(r.randint(-3, 9)), "2.5"]
                                  + (["loop.index", "loop.index0", "loop.length", "loop.revindex"] if self.in_loop else []))
        return self.pick([leaf, leaf,
                          lambda e: f"{self.N(e)} {self.c(_C5)} {self.N(e)}",
                          lambda e: f"{self.N(e)} {self.c(_C6)} (m + 1)",
                          lambda e: f"{self.N(e)} ** {r.randint(0, 2)}",
                          lambda e: f"-{self.N(e)}",
                          lambda e: f"{self.N(e)}|{self.c(_C7)}",
                          lambda e: f"{self.S(e)}|{self.c(_C8)}",
                          lambda e: f"{self.L(e)}|length",
                          lambda e: f"items|{self.c(_C9)}",
                          lambda e: f"{self.S(e)}.{self.c(_C10)}",
                          ], d)

    def B(self, d: int = 2) -> str:
        r = self.r
        leaf = lambda _: r.choice(["flag", "true", "false"] + (["loop.first", "loop.last"] if self.in_loop else []))
        return self.pick([leaf,
                          lambda e: f"{self.N(e)} {self.c(_C11)} {self.N(e)}",
                          lambda e: f"{self.S(e)} {self.c(_C12)} {self.S(e)}",
                          lambda e: f"{self.N(e)} in items",
                          lambda e: f"not {self.B(e)}",
                          lambda e: f"({self.B(e)} {self.c(_C13)} {self.B(e)})",
                          lambda e: f"{self.A(e)} is {self.c(_C14)}{self.c(_C15)}",
                          lambda e: f"{self.N(e)} is {r.choice(['odd', 'even', 'divisibleby 3', 'divisibleby(2)', 'eq 3', 'gt 2', 'le 5', 'ne 0', 'in [1, 2, 3]'])}",
                          lambda e: f"{self.S(e)} is {self.c(S_TESTS)}",
                          lambda e: f"{self.S(e)}.{self.c(_C16)}",
                          lambda e: f"{self.A(e)}",
                          ], d)

    def L(self, d: int = 2) -> str:
        r = self.r
        leaf = lambda _: r.choice(["items", "words", "user.tags", "[1, 'two', 3.0]", "[]", "msgs|map(attribute='role')|list"])
        return self.pick([leaf, leaf,
                          lambda e: f"{self.S(e)}.split({self.c(_C17)})",
                          lambda e: f"items|{self.c(_C18)}",
                          lambda e: f"words|{self.c(_C19)}",
                          lambda e: f"msgs|{self.c(MSG_FILTERS)}",
                          lambda e: f"{self.L(e)}[{self.c(_C20)}]",
                          lambda e: f"{self.L(e)} + {self.L(e)}",
                          lambda e: f"[{self.A(e)}, {self.A(e)}]",
                          lambda e: f"range({self.c(_C21)})|list",
                          lambda e: f"{self.D(e)}|{self.c(_C22)}",
                          lambda e: f"{self.D(e)}.{self.c(_C23)}",
                          ], d)

    def D(self, d: int = 2) -> str:
        r = self.r
        leaf = lambda _: r.choice(["user", "msgs[0]", "{'a': 1, 'b': 'x'}", "user.extra|default({}, true)"])
        return self.pick([leaf, leaf,
                          lambda e: f"{{'k': {self.A(e)}, 'z': {self.A(e)}}}",
                          lambda e: f"dict(a={self.A(e)})",
                          ], d)

    def A(self, d: int = 2) -> str:
        r = self.r
        if self.loop_vars and r.random() < 0.25:
            return r.choice(self.loop_vars)
        if r.random() < 0.06:
            return r.choice(["missing", "user.missing", "nothing", "user.extra", "none"])
        if self.macros and r.random() < 0.1:
            name, nargs = r.choice(self.macros)
            return f"{name}({', '.join(self.A(d - 1) for _ in range(r.randint(0, nargs)))})"
        return getattr(self, r.choice("SSNNBLD"))(d)

    def expr(self, d: int = 2) -> str:
        return self.A(d)

    # ---- statements
    def ws(self) -> str:
        return self.r.choice(["", "", " ", "\n", "  ", "\n  ", "  \n", "\n\n", "\t", " x ", "word\n", "\n    "])

    def tag(self, body: str) -> str:
        r = self.r
        left = r.choice(["{%", "{%", "{%-", "{%+"])
        right = r.choice(["%}", "%}", "-%}", "+%}"])
        return f"{left} {body} {right}"

    def out(self) -> str:
        r = self.r
        return f"{r.choice(['{{', '{{', '{{-'])} {self.expr()} {r.choice(['}}', '}}', '-}}'])}"

    def block(self, d: int) -> str:
        parts = []
        for _ in range(self.r.randint(1, 4)):
            parts.append(self.ws())
            parts.append(self.stmt(d))
        parts.append(self.ws())
        return "".join(parts)

    def stmt(self, d: int) -> str:
        r = self.r
        k = r.randrange(12) if d > 0 else r.choice([0, 0, 1, 9])
        if k <= 2:
            return self.out()
        if k == 3:
            s = self.tag(f"if {self.B()}") + self.block(d - 1)
            for _ in range(r.randint(0, 2)):
                s += self.tag(f"elif {self.B()}") + self.block(d - 1)
            if r.random() < 0.5:
                s += self.tag("else") + self.block(d - 1)
            return s + self.tag("endif")
        if k == 4:
            var = r.choice(["x", "item", "w"])
            seq = r.choice(["items", "words", "msgs", "user", "user.tags", "range(3)", "s", "user.items()", "nothing",
                            "missing", "[1, 2, 3]", "items|sort", self.L(1), self.L(1)])
            target = var
            if seq == "user.items()":
                target = "k, v"
            cond = f" if {self.B(1)}" if r.random() < 0.2 else ""
            self.loop_vars += target.split(", ")
            self.in_loop += 1
            body = self.block(d - 1)
            if r.random() < 0.25:
                body += self.tag(f"if {self.B(1)}") + self.tag(r.choice(["break", "continue"])) + self.tag("endif")
                body += self.block(d - 1)
            self.in_loop -= 1
            for _ in target.split(", "):
                self.loop_vars.pop()
            s = self.tag(f"for {target} in {seq}{cond}") + body
            if r.random() < 0.3:
                s += self.tag("else") + self.block(d - 1)
            return s + self.tag("endfor")
        if k == 5:
            var = r.choice(["a", "b", "s", "items", "n"])
            return self.tag(f"set {var} = {self.expr()}")
        if k == 6:
            return (self.tag(f"set ns = namespace(c=0, t='')") + self.block(d - 1) +
                    self.tag("set ns.c = ns.c + 1") + self.tag(f"set ns.t = ns.t ~ {self.expr(1)}") + "{{ ns.c }}{{ ns.t }}")
        if k == 7:
            return self.tag("set blk") + self.block(d - 1) + self.tag("endset") + "[{{ blk }}]"
        if k == 8:
            f = r.choice(["upper", "trim", "lower|replace('a', '4')", "indent(3)", "title"])
            return self.tag(f"filter {f}") + self.block(d - 1) + self.tag("endfilter")
        if k == 9:
            return r.choice(["{# a comment #}", "{#- trimmed -#}", "{# multi\nline #}", "plain text", "\n"])
        if k == 10:
            return self.tag("generation") + self.block(d - 1) + self.tag("endgeneration")
        return self.tag(f"set {r.choice(['a', 'b'])} | trim") + self.block(d - 1) + self.tag("endset") if False else self.out()

    def template(self) -> str:
        r = self.r
        head = ""
        if r.random() < 0.4:
            nargs = r.randint(0, 2)
            params = ", ".join(["p", "q='dq'"][:nargs])
            self.loop_vars += ["p", "q"][:nargs]
            body = self.block(1)
            self.loop_vars = self.loop_vars[:len(self.loop_vars) - nargs]
            head = self.tag(f"macro mac({params})") + body + self.tag("endmacro") + self.ws()
            self.macros.append(("mac", nargs))
        return head + self.block(3)


def random_case(seed: int) -> tuple[str, dict]:
    r = random.Random(seed)
    return Gen(r).template(), random_data(r)
