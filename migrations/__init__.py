"""Alembic environment and revisions for Arbiter's schema.

Run through :func:`storage.db.upgrade_database` (or ``arbiter db upgrade``), which
builds the Alembic configuration in code and points ``script_location`` here; no
``alembic.ini`` is needed. To write a new revision, autogenerate against a database at
head, then review it by hand (names come from the naming convention in
:mod:`storage.models`)::

    python -c "from alembic import command; from storage.db import alembic_config; \\
        command.revision(alembic_config('sqlite:///var/dev.db'), 'what changed', autogenerate=True)"
"""
