"""The learning lab: exact references and the capacity probe (docs/lab.md)."""
