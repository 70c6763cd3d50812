"""The plugin's former entry point, kept so that an install whose metadata still names it
keeps its fixtures: the plugin is :mod:`delayq_pytest`."""

from delayq_pytest import delayq_redis, delayq_redis_url

__all__ = ["delayq_redis", "delayq_redis_url"]
