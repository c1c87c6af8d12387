"""The human report: reports/build.py renders claims.json as index.html and claims.md."""
