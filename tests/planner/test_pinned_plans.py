"""Plans pinned before the placement engine moved to sweep-line and interval structures.

The figures were computed with the pairwise engine on every trace of the shared benchmark
folder and on two generated problems: each strategy riding the engine must still produce
exactly these plans (the arena, and a digest of every offset). `optimal` is left out (its
search, not the engine, sets its answer, and it is slow); `hill_climb` runs a fixed number
of moves so that its answer does not depend on the clock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from planner import Plan, plan
from planner.csvio import load_csv
from planner.generate import network_like, training_like

TRACES = Path(__file__).resolve().parents[3] / "shared" / "bench"
OPTIONS = {"hill_climb": {"max_iterations": 30, "time_limit": 1e9}}
GENERATED = {"nl2000": lambda: network_like(2000), "tl2000": lambda: training_like(2000, seed=1)}

# problem: {strategy: (arena bytes, digest of the offsets)}
PINNED = {
    "iopddl_G_1.csv": {
        "naive": (6060429057, "bd32f32d47c9ba7c"),
        "bump": (6060429057, "aa0318480d779317"),
        "first_fit": (3057964734, "9177ad8099b15f80"),
        "wic": (3039277202, "e9da7c3250ce2b49"),
        "greedy_by_size": (3030940307, "e2bc954eb47498c7"),
        "greedy_by_breadth": (3030937746, "636b9f8a4f76f97a"),
        "greedy_by_conflicts": (3065034844, "efe10c3ab7025fe8"),
        "best_fit": (3041655938, "71a95c8df4e30d67"),
        "hill_climb": (3039277202, "427bd26863d935b5"),
    },
    "minimalloc_A.1048576.csv": {
        "naive": (15071232, "cdd265c294c5dfc0"),
        "bump": (15071232, "913744cd22556d74"),
        "first_fit": (1608704, "5c8b3750c523378b"),
        "wic": (1352704, "e732d5b6af916210"),
        "greedy_by_size": (1374208, "ddb6eb1b4e9bfd38"),
        "greedy_by_breadth": (1611776, "26cb4f977d6d553e"),
        "greedy_by_conflicts": (1576960, "64a5a8e52e717cc2"),
        "best_fit": (1374208, "7433d13e1a4807e0"),
        "hill_climb": (1341440, "9755fb10f12532d8"),
    },
    "minimalloc_B.1048576.csv": {
        "naive": (17871872, "31e613e4dcdc4354"),
        "bump": (17871872, "0bdfcbdb855bc227"),
        "first_fit": (1775616, "c0731ec15b9711a1"),
        "wic": (1412096, "67580fec2c98db24"),
        "greedy_by_size": (1412096, "7b60e61e8cdc0d07"),
        "greedy_by_breadth": (1681408, "0df4983ad2f9c427"),
        "greedy_by_conflicts": (1696768, "ae63731de164ac5d"),
        "best_fit": (1412096, "5da331d8b19e71eb"),
        "hill_climb": (1373184, "9d5b1fb986a7a9c4"),
    },
    "minimalloc_C.1048576.csv": {
        "naive": (21476352, "d6fdd3a4faa20360"),
        "bump": (21476352, "6430407a3567db7f"),
        "first_fit": (1769472, "b5ce356281be0442"),
        "wic": (1417216, "8acc9ce5f37b788a"),
        "greedy_by_size": (1417216, "d217dc419c698602"),
        "greedy_by_breadth": (1752064, "168e618150000a11"),
        "greedy_by_conflicts": (1427456, "fcef14401575532b"),
        "best_fit": (1417216, "9924a3b77ef3a671"),
        "hill_climb": (1417216, "f205c29d9298fa25"),
    },
    "minimalloc_D.1048576.csv": {
        "naive": (7328768, "aaf4bbf177d9044a"),
        "bump": (7328768, "005995a0d04c06e7"),
        "first_fit": (1547264, "8521c7d7ea8c5592"),
        "wic": (1291264, "653a75a9640b1f1b"),
        "greedy_by_size": (1315840, "867b2ca10d298493"),
        "greedy_by_breadth": (1511424, "3e17f8f522f3913c"),
        "greedy_by_conflicts": (1417216, "cd7812d1baf60ffe"),
        "best_fit": (1304576, "6afd33c45c80b9ec"),
        "hill_climb": (1273856, "88c163dba4bb3e4d"),
    },
    "minimalloc_E.1048576.csv": {
        "naive": (25556992, "6f58255657b77c34"),
        "bump": (25556992, "3f032bc476d18255"),
        "first_fit": (1981440, "2992eecf8c337c08"),
        "wic": (1435648, "d85e7c84cd05eda4"),
        "greedy_by_size": (1469440, "26d8fd1311945167"),
        "greedy_by_breadth": (1759232, "5a72103e2f477504"),
        "greedy_by_conflicts": (1625088, "4f4967b73e00443d"),
        "best_fit": (1469440, "26d8fd1311945167"),
        "hill_climb": (1387520, "a7a17289c359c423"),
    },
    "minimalloc_F.1048576.csv": {
        "naive": (20930560, "4a2317ab8a6874cb"),
        "bump": (20930560, "f674d54cbdb71a22"),
        "first_fit": (1277952, "a1a19161d4b54cd4"),
        "wic": (1441792, "f5d938542c2ce895"),
        "greedy_by_size": (1441792, "ecc431d6804c3af8"),
        "greedy_by_breadth": (1436672, "0cb368c050a5ea40"),
        "greedy_by_conflicts": (1472512, "ad2801da4c1c5887"),
        "best_fit": (1433600, "123031917da2f5b8"),
        "hill_climb": (1316864, "5666a1e4dddcebfd"),
    },
    "minimalloc_G.1048576.csv": {
        "naive": (20795392, "f8ccb9905841b48f"),
        "bump": (20795392, "23a670f3245a8a49"),
        "first_fit": (1343488, "cdfabf2c45bff7d5"),
        "wic": (1396736, "4cfefa2c2ef7688e"),
        "greedy_by_size": (1396736, "ef78d2b7f5d239a3"),
        "greedy_by_breadth": (1291264, "c2c0ef5ed0effab8"),
        "greedy_by_conflicts": (1554432, "340e67ae93a51e71"),
        "best_fit": (1428480, "633b9cd2b55d4fa5"),
        "hill_climb": (1396736, "6ae3d2f011f5e8b0"),
    },
    "minimalloc_H.1048576.csv": {
        "naive": (20830208, "e7c90d94df4618cb"),
        "bump": (20830208, "768aa20ed7495d67"),
        "first_fit": (1299456, "3a569ebed3003fec"),
        "wic": (1421312, "de6eb2fbe7f25edb"),
        "greedy_by_size": (1421312, "dc565d2e7b80f8b4"),
        "greedy_by_breadth": (1293312, "dfb3ef0340450a48"),
        "greedy_by_conflicts": (1483776, "279e6669deeca10b"),
        "best_fit": (1405952, "9989a5cb4bb6dcaa"),
        "hill_climb": (1318912, "ab582727c6daceb5"),
    },
    "minimalloc_I.1048576.csv": {
        "naive": (48854016, "b73aa3c79dd4d99b"),
        "bump": (48854016, "8ff1c6a844b4fddc"),
        "first_fit": (1629184, "12aca36841860e32"),
        "wic": (1478656, "e2b53e2350e25e34"),
        "greedy_by_size": (1478656, "fdd675b4f033b50f"),
        "greedy_by_breadth": (1752064, "7e5403184a9d0197"),
        "greedy_by_conflicts": (1455104, "d09a217b124927d2"),
        "best_fit": (1478656, "b4a2d08d98f6a118"),
        "hill_climb": (1478656, "5b3c19b5197f2d4c"),
    },
    "minimalloc_J.1048576.csv": {
        "naive": (13794304, "e4032776e2b71477"),
        "bump": (13794304, "d9a474112d77aa6d"),
        "first_fit": (1587200, "267a0201c2338839"),
        "wic": (1303552, "4580758b17163254"),
        "greedy_by_size": (1333248, "c9b14034716b0ea5"),
        "greedy_by_breadth": (1471488, "6b8560883285657c"),
        "greedy_by_conflicts": (1640448, "895b7a2c6c1e868e"),
        "best_fit": (1333248, "3c5810c90ba45e97"),
        "hill_climb": (1280000, "7c80ac91b84c6a8d"),
    },
    "minimalloc_K.1048576.csv": {
        "naive": (79005696, "17396abaec66f19f"),
        "bump": (79005696, "daf3a4b6ae64deec"),
        "first_fit": (2102272, "7125e0e7c843933d"),
        "wic": (1352704, "05cede93ec523c11"),
        "greedy_by_size": (1391616, "55a6884f8d4104e1"),
        "greedy_by_breadth": (2472960, "2a7199d2e17332c3"),
        "greedy_by_conflicts": (2051072, "9be6073950da36a1"),
        "best_fit": (1397760, "425b1a3ef28bd6c0"),
        "hill_climb": (1346560, "7d3b080cf2669fcb"),
    },
    "somas_tensors_resnet50.csv": {
        "naive": (3424204028, "5845211060527175"),
        "bump": (3424204028, "5845211060527175"),
        "first_fit": (1528512004, "8799d09262dd433c"),
        "wic": (1525214892, "aa28970c5d0e172b"),
        "greedy_by_size": (1525964460, "f3701d021f1333ad"),
        "greedy_by_breadth": (1524909740, "0a3e7523d36b3804"),
        "greedy_by_conflicts": (1523623636, "fc4eaf2716eeeef4"),
        "best_fit": (1522216620, "c7f569eece5c8448"),
        "hill_climb": (1525214892, "5e7800ef8641c798"),
    },
    "nl2000": {
        "naive": (1023636928, "7dc64cbdc8449828"),
        "bump": (1023636928, "6cdc9879a35cf5bf"),
        "first_fit": (19244928, "af7ac9a979956637"),
        "wic": (18117632, "e4c9bc2adf8491c9"),
        "greedy_by_size": (18117632, "d3f407de34d1a35c"),
        "greedy_by_breadth": (18117632, "83584a525fa98456"),
        "greedy_by_conflicts": (19410240, "e3450424e7a12362"),
        "best_fit": (18117632, "86ce5498530063df"),
        "hill_climb": (18117632, "485305ffe021bb8a"),
    },
    "tl2000": {
        "naive": (533290176, "f79620fd5aac67d8"),
        "bump": (533290176, "7e8c54bca76bebd4"),
        "first_fit": (305594944, "8dfba9597dba2af5"),
        "wic": (258697088, "fde509fa4f4e1c20"),
        "greedy_by_size": (264551808, "3612cc74cc2c04bb"),
        "greedy_by_breadth": (258968768, "fd0a6dc49dd5cdc6"),
        "greedy_by_conflicts": (298911936, "98db4099dd0ca042"),
        "best_fit": (264551808, "3612cc74cc2c04bb"),
        "hill_climb": (258697088, "fde509fa4f4e1c20"),
    },
}


def digest(result: Plan) -> str:
    lines = "".join(f"{i}:{p.pool}:{p.offset}\n" for i, p in result.offsets.items())
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_strategy_makes_the_pinned_plan(name):
    if name in GENERATED:
        problem = GENERATED[name]()
    elif (TRACES / name).exists():
        problem = load_csv(TRACES / name)
    else:
        pytest.skip(f"{name} is not in the shared benchmark folder")
    for strategy, (arena, offsets) in PINNED[name].items():
        result = plan(problem, strategy, **OPTIONS.get(strategy, {}))
        assert (result.arena_bytes, digest(result)) == (arena, offsets), strategy
