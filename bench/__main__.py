"""``python -m bench [--smoke] [--only CASE,...]``: run the benchmark harness."""

from bench.runner import main

main()
