"""The Core views that the listing commands read agree with the models."""

from __future__ import annotations

import pytest
from sqlalchemy import DateTime

from spawnflow.models import Base, views


@pytest.mark.parametrize("view", [views.dag, views.dag_run, views.task_instance, views.job,
                                  views.import_error, views.dag_file, views.serialized_dag],
                         ids=lambda view: view.name)  # fmt: skip
def test_each_view_column_is_its_model_s_column_with_the_same_type(view):
    model = Base.metadata.tables[view.name]
    for column in view.columns:
        assert column.name in model.columns, f"{view.name}.{column.name} is not in the model"
        modelled = model.columns[column.name].type
        # The view's type is the model's or what it specialises (Identifier is a String).
        assert isinstance(modelled, type(column.type)), (column.name, modelled, column.type)
        if isinstance(modelled, DateTime):
            assert column.type.timezone == modelled.timezone, column.name
