"""Where prepare's steps run: Beam options and pipelines, the watched local or remote job, its
workers' environment, retries, failures and progress."""
