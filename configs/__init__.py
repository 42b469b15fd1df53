"""The tuned configs, shipped as package data (``msrl_consistent.configs``): ``<algorithm>/<env id>.yaml``."""
