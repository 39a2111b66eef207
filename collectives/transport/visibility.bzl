"""Who may use the transport floor's targets: every transport folder's BUILD names it.

The layering check (tools/check_layering.sh) enforces the floors themselves.
"""

TRANSPORT_USERS = [
    "//collectives:__subpackages__",
    "//runtime:__subpackages__",
    "//bench:__subpackages__",
    "//tests:__subpackages__",
    "//tools:__subpackages__",
]
