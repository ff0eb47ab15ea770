"""What every entry point runs on: the device mesh and its logical axis rules, agreement
between hosts, the compile cache, local and gs:// paths, jsonl files, progress bars."""
