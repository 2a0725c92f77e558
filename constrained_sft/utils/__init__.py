"""
Small helpers every floor of the package may use, one concept per module: `files` (atomic writes, strict JSON and
YAML reads, the cache folder), `content` (what a local data source holds, as a content id), `written` (what the library wrote into a folder,
recognised by a record of names and hashes), `folders` (output folders a command may write to, names that build folders),
`fields` (a dataclass field's value against its annotation), `modules` (the transformers model inside wrappers, ZeRO-3
gathering), `figures` (matplotlib on the file backend), `patches` (frames to patch sequences and back), `help_text`
(argparse's '%').

May import: nothing of the package (`version` aside).
"""
