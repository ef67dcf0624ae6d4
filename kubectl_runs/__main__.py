from kubectl_runs.cli.main import entrypoint

entrypoint()
