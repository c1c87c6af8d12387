"""Your conjectures: one ``claims_<name>.py`` per conjecture (or per family), each a claim of
``kind="conjecture"`` written with ``from theorems import ...`` (docs/conjectures.md). Any
``claims_*.py`` here joins the suite; a conjecture is reported, never gated."""
