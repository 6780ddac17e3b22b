"""The daemon's protocol as data: versions, error codes, params models, shapes, schema. No I/O."""
