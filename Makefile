.PHONY: demo test dist bench lint
demo:
	./scripts/demo
test:
	./scripts/test
dist:
	./scripts/dist
bench:
	./scripts/bench
lint:
	.venv/bin/ruff check . && .venv/bin/lint-imports --no-cache
