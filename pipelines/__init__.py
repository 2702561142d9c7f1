"""Ready-made pipeline manifests, shipped as package data (see ``hetflow examples``)."""
