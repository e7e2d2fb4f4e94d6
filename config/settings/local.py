"""Local development: the embedded defaults of ``base`` plus DEBUG."""

from config.settings.base import *  # noqa: F403
from config.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
