"""Hard cases for a Chinese sentence splitter, each with the splits handlers/text/splitting.py's rules
call for (issue 8): book titles with ！ inside 《》, quotes, ellipses, numbers like 3.5, mixed
Latin text.

HARD_CASES are pinned by tests/unit/test_splitting.py, which imports them from here. The splitter
study that scored pysbd and sentencex on these and 22 more cases is finished
(bench/studies/README.md); its code and EXTRA_CASES are in `git show 0d1275e:bench/splitter_cases.py`.
"""

from __future__ import annotations

HARD_CASES: list[tuple[str, list[str]]] = [
    # A ！ inside a book title does not end the sentence.
    ("我读了《你好！世界》。然后睡觉了。", ["我读了《你好！世界》。", "然后睡觉了。"]),
    # Nor does a 。 inside a quotation; the closing quote stays with its sentence.
    ("他说：“我很好。你呢？”我没回答。", ["他说：“我很好。你呢？”我没回答。"]),
    ("「好。」她说。她走了。", ["「好。」她说。", "她走了。"]),
    ('他说："好。""不。"', ['他说："好。"', '"不。"']),
    ("他问：“真的吗？”", ["他问：“真的吗？”"]),
    ("（注：见上文。）下一句。", ["（注：见上文。）下一句。"]),
    # Decimal numbers and ASCII dots inside Latin words.
    ("价格是3.5元。很便宜！", ["价格是3.5元。", "很便宜！"]),
    ("I use Python 3.5. 我喜欢它。", ["I use Python 3.5.", "我喜欢它。"]),
    ("e.g. the cat. 好的", ["e.g. the cat.", "好的"]),
    # Runs of terminators and ellipses stay together.
    ("什么?!真的。", ["什么?!", "真的。"]),
    ("真的吗？？是的。", ["真的吗？？", "是的。"]),
    ("他来了……我走了。", ["他来了……", "我走了。"]),
    ("我们走吧；他们留下。", ["我们走吧；", "他们留下。"]),
    # An opener without its closer does not glue the rest of the line together.
    ("（未闭合。继续。", ["（未闭合。", "继续。"]),
    # Mixed Latin text: an English sentence is its own sentence.
    ("Hello world. 你好。", ["Hello world.", "你好。"]),
    ("没有标点的一句话", ["没有标点的一句话"]),
]
