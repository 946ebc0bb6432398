"""Calibration records in the results store (table `calibrations`, store schema 5): write one,
read one by id, list those of an engine and device type, newest first.

A record is round-tripped before it is written and one this version cannot read (a newer record
schema, corrupt JSON) is refused with one line on read, as runs are.
"""

from __future__ import annotations

import json

from pydantic import ValidationError
from sqlalchemy import Connection, insert, select

from bench.core.calibration import CALIBRATION_SCHEMA_VERSION, CalibrationRecord
from bench.core.errors import UserError
from bench.core.strict import describe_validation_error
from bench.storage.store import ResultStore
from bench.storage.store_schema import calibrations


def parse_record(calibration_id: str, text_: str) -> CalibrationRecord:
    """A stored or written record; UserError (one line) for one this version cannot read."""
    try:
        data = json.loads(text_)
    except ValueError as error:
        raise UserError(f"calibration {calibration_id} is not JSON ({error})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > CALIBRATION_SCHEMA_VERSION:
        raise UserError(
            f"calibration {calibration_id} has record schema {version}; this version reads up "
            f"to {CALIBRATION_SCHEMA_VERSION}: upgrade inference-advisor"
        )
    try:
        return CalibrationRecord.model_validate(data)
    except ValidationError as error:
        raise UserError(
            f"calibration {calibration_id} cannot be read: {describe_validation_error(error)}"
        ) from None


def put_calibration(store: ResultStore, record: CalibrationRecord) -> None:
    """Store a record (a new id; an id already stored is refused)."""
    text_ = record.model_dump_json()
    parse_record(record.calibration_id, text_)  # nothing is stored that cannot be read back

    def write(conn: Connection) -> None:
        conn.execute(
            insert(calibrations),
            {
                "calibration_id": record.calibration_id,
                "created_at": record.created_at,
                "engine": record.engine,
                "model": record.model,
                "device_type": record.device_type,
                "precision_class": record.precision_class,
                "record_json": text_,
            },
        )

    store._transaction(write)


def get_calibration(store: ResultStore, calibration_id: str) -> CalibrationRecord:
    """One record; UserError when there is none."""
    text_ = store._read(
        lambda conn: conn.execute(
            select(calibrations.c.record_json).where(
                calibrations.c.calibration_id == calibration_id
            )
        ).scalar_one_or_none()
    )
    if text_ is None:
        raise UserError(f"no calibration {calibration_id} in the store")
    return parse_record(calibration_id, text_)


def list_calibrations(
    store: ResultStore, engine: str | None = None, device_type: str | None = None
) -> list[CalibrationRecord]:
    """The records of an engine and device type (either may be None: any), newest first;
    a row this version cannot read is skipped (it is named when read by id)."""
    query = select(calibrations.c.calibration_id, calibrations.c.record_json)
    if engine is not None:
        query = query.where(calibrations.c.engine == engine)
    if device_type is not None:
        query = query.where(calibrations.c.device_type == device_type)
    query = query.order_by(calibrations.c.created_at.desc())
    rows = store._read(lambda conn: conn.execute(query).all())
    records = []
    for calibration_id, text_ in rows:
        try:
            records.append(parse_record(calibration_id, text_))
        except UserError:
            continue
    return records


__all__ = ["get_calibration", "list_calibrations", "parse_record", "put_calibration"]
