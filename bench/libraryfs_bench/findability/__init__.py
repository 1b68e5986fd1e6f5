"""The findability benchmark (issue 13 item 1): can an agent find the right entry of a real library?

Real corpora built with the real CLI and read through the mount (:mod:`.corpora`); query sets from sources
independent of the TOC text and of the summariser, with a held-out split (:mod:`.queries`, ``data/``);
navigators side by side (:mod:`.navigators`, :mod:`.llmnav`, :mod:`.flat`); tables, JSON and plots
(:mod:`.report`, :mod:`.run`). See README.md beside this file.
"""
