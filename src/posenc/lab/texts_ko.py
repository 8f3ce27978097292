"""The Korean text of every lab experiment: its title, its claim and its one-line headline.

Written for posenc (not taken from the source articles). The English texts are the experiments' own
(``Entry.title``, ``Finding.claim``) and ``report.HEADLINES``; ``tests/lab/test_i18n.py`` checks that every
registered experiment has all three here, so a new experiment cannot ship without its Korean.
Headlines read the same ``values`` as the English ones and format the same numbers the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from posenc.lab.i18n import fmt_number


def _n(x: object, digits: int = 3) -> str:
    return fmt_number(x, digits, lang="ko")


TITLES: dict[str, str] = {
    "naive-position": "원시 번호를 좌표로 쓰면 내용이 묻힌다",
    "sinusoid-norm": "사인파의 모든 행은 노름이 √(d/2)",
    "distance-only": "PE(i)·PE(j) 는 i − j 에만 달려 있다",
    "not-monotonic": "…그러나 그 거리의 함수는 줄어들기만 하지 않는다",
    "shift-is-linear": "k 만큼의 이동은 선형사상 하나 (짝마다 회전 하나)",
    "beyond-training-length": "식은 어느 위치에서나 정의된다",
    "position-vs-content": "위치를 더하면 어텐션이 주제에서 이웃으로 옮겨 간다",
    "permutation": "위치 없는 어텐션은 순열 등변이다",
    "pe-module": "모듈로서의 인코딩: 표, 드롭아웃, 열, 히트맵",
    "multihead-shapes": "멀티헤드 어텐션은 모양을 지키고 유효 길이를 따른다",
    "complexity": "CNN 대 RNN 대 셀프 어텐션, 재어 보기",
    "encoder-decoder-causal": "디코더 마스킹: 어느 위치도 뒤를 보지 않는다",
    "exercises-depth": "연습문제: 어텐션 층을 쌓으면 위치가 흐려진다",
    "exercises-learned": "연습문제: 학습형 위치 임베딩",
    "exercises-relative": "연습문제: 상대 위치는 이동을 견딘다",
    "lookup-is-matmul": "조회는 원-핫 행렬곱에서 일만 뺀 것",
    "table-size": "표에는 V·d 개의 수가 들어 있다",
    "tying": "입력·출력 표 묶기: 2·V·d 대신 V·d",
    "self-score": "자기 행이 대개 가장 높다 — 늘 그렇지는 않다",
    "cosine-vs-dot": "행 하나를 늘이면: 코사인 목록은 그대로, 내적 목록은 바뀐다",
    "sqrt-d": "×√d 는 모든 노름을 √d 배로 하고 방향은 그대로 둔다",
    "no-context": "임베딩은 문맥을 모른다",
}

CLAIMS: dict[str, str] = {
    "naive-position": "위치 번호를 그대로 좌표 하나로 붙이면 로짓에 i·j/√5 가 더해진다. 그 폭은 위치가 뒤로 갈수록 "
                      "커져 결국 내용을 덮고, 소프트맥스가 포화한다 (최대 확률 → 1).",
    "sinusoid-norm": "사인파 표는 모든 위치에서 노름이 √(d/2) 로 같다.",
    "distance-only": "사인파 두 행의 내적은 두 위치 사이의 거리에만 달려 있다. 그람 행렬의 대각선마다 편차는 반올림 "
                     "잡음뿐이고, 값은 Σ_i cos((i−j)·ω_i) 와 같다.",
    "not-monotonic": "사인파 내적은 거리가 멀어질수록 줄어들기만 하는 것이 아니다. 여러 구간에서 다시 커지고, 최소값은 "
                     "가장 먼 거리보다 한참 앞에 있다.",
    "shift-is-linear": "간격 k 마다 고정된 행렬 M_k 하나가 모든 p 에서 PE(p) 를 PE(p + k) 로 보낸다 (주파수 짝마다 "
                       "2×2 회전). 같은 크기의 무작위 표에는 그런 사상이 없다.",
    "beyond-training-length": "사인파는 학습에서 한 번도 보지 않은 위치에서도 정의된다. 그곳의 노름과 이웃끼리의 내적은 "
                              "원점에서의 값과 같다. 학습형 표에는 그 자리의 행이 없다.",
    "position-vs-content": "내용 벡터에 위치 인코딩을 더하면 어텐션이 움직인다. 토큰 0 이 주제 짝에 주던 몫은 줄고 바로 "
                           "옆 토큰의 몫은 는다. 임베딩을 키우면 (×√d) 내용이 다시 앞선다.",
    "permutation": "위치가 없는 어텐션은 순열 등변이다. 위치를 제자리에 두고 토큰만 섞으면 등변이 깨지고, 위치가 토큰을 "
                   "따라 함께 움직이면 다시 등변이 된다.",
    "pe-module": "모듈 하나가 미리 계산해 둔 사인파 표를 (batch, seq, d) 입력에 더한다 (모양은 그대로, 드롭아웃 포함). "
                 "앞쪽 열일수록 빨리 진동한다 — 이진 카운터의 아랫자리 비트처럼.",
    "multihead-shapes": "멀티헤드 어텐션은 (batch, queries, d) 를 같은 모양으로 보낸다. 시퀀스의 유효 길이 밖에 있는 "
                        "키는 가중치가 0 이라, 그 키를 바꿔도 아무것도 바뀌지 않는다.",
    "complexity": "셀프 어텐션은 연산이 O(n²·d) 이지만 순차 단계와 경로 길이는 O(1) 이다. RNN 은 O(n·d²) 에 순차 단계와 "
                  "경로가 O(n), CNN 은 O(k·n·d²) 에 단계 O(1), 경로 O(n/k) 이다.",
    "encoder-decoder-causal": "디코더의 마스크드 셀프 어텐션은 어느 위치도 뒤의 위치를 보지 못하게 한다. 미래의 목표 토큰을 "
                              "바꿔도 앞선 출력은 변하지 않는다. 인코더는 원문 전체를 보고, 디코더의 모든 출력은 크로스 "
                              "어텐션을 거쳐 원문에 기댄다.",
    "exercises-depth": "한 번 더한 위치 인코딩 위에 어텐션 층을 쌓으면 위치가 씻겨 나간다. 층마다 토큰들을 평균하므로 잔차 "
                       "연결이 없으면 은닉 상태가 한 점으로 모이고, 선형 프로브가 위치를 더는 읽지 못한다. 잔차 연결이 "
                       "위치를 실어 나른다.",
    "exercises-learned": "학습형 위치 표 (위치마다 학습한 벡터 하나) 는 순서가 필요한 과제를 사인파만큼 잘 푼다. 그러나 "
                         "학습 길이 너머의 행이 없고, 이동에 불변인 구조를 거저 얻지도 못한다.",
    "exercises-relative": "상대 위치 (RoPE, Shaw 외, T5 …) 에서는 어텐션이 질의와 키 사이의 간격에만 달려 있어서, 위치 "
                          "0…T−1 에서 학습한 모델이 아주 먼 위치에서도 그대로 동작한다. 절대 인코딩은 그렇지 못하다.",
    "lookup-is-matmul": "표에서 id 번째 행을 꺼내는 것은 one_hot(id) @ table 과 정확히 같다. 조회는 id 하나마다 V·d 번의 "
                        "곱셈-덧셈을 건너뛸 뿐이다.",
    "table-size": "임베딩 표에는 V·d 개의 수가 들어 있다. 어휘를 두 배로 늘리면 그 수도 두 배가 된다.",
    "tying": "가중치를 묶으면 출력 헤드가 곧 임베딩 표다 (모두 합쳐 V·d 개). 따로 두면 표가 한 벌 더 있다 (2·V·d). "
             "로짓 하나는 은닉 벡터와 표의 한 행의 내적이다.",
    "self-score": "은닉 벡터가 어떤 토큰의 임베딩과 같으면, 내적으로는 대개 그 토큰이 가장 높은 점수를 받는다 — 하지만 더 "
                  "긴 행이 이길 수 있다 (코사인으로는 그런 일이 없다).",
    "cosine-vs-dot": "한 행을 늘여도 코사인 이웃 목록은 하나도 바뀌지 않는다. 그러나 내적으로는 늘인 행이, 그 행이 가리키는 "
                     "쪽 토큰들의 목록 맨 앞으로 튀어나온다. 가까움은 코사인으로, 점수는 내적으로.",
    "sqrt-d": "임베딩에 √d 를 곱하면 모든 노름이 정확히 √d 배가 되고 방향은 하나도 바뀌지 않는다.",
    "no-context": "같은 id 는 어디에 있든 같은 벡터를 준다. 임베딩에는 문맥이 없다 (위치를 더해야 복사본들이 달라진다).",
}


def _naive(v: dict) -> str:
    return "; ".join(f"@{x['start']}: 위치 {_n(x['position_spread'], 2)} 대 내용 {_n(x['content_spread'], 2)}, "
                     f"최대 확률 {_n(x['max_prob'])}" for x in v["windows"])


HEADLINES: dict[str, Callable[[dict], str]] = {
    "naive-position": _naive,
    "sinusoid-norm": lambda v: f"노름 {v['norm']:.4f} (√(d/2) {v['expected']:.4f}), 편차 {_n(v['norm_spread'])}",
    "distance-only": lambda v: f"대각선 편차 {_n(v['diagonal_spread'])}, Σcos 와의 차이 {_n(v['formula_error'])}",
    "not-monotonic": lambda v: (f"{', '.join(f'{x:.2f}' for x in v['profile_head'][:7])}…; {v['steps']}구간 중 "
                                f"{v['increases']}곳에서 증가, 최소 {v['min']:.2f} (거리 {v['argmin']}), 마지막 "
                                f"{v['last']:.2f}"),
    "shift-is-linear": lambda v: (f"k={v['offsets']}: 사인파 ≤ {_n(max(v['sinusoid_residual']))}, 무작위 ≥ "
                                  f"{_n(min(v['random_residual']))} (상대 {_n(min(v['random_relative']))})"),
    "beyond-training-length": lambda v: (f"p={v['position']}: 노름 {v['norm']:.4f}, PE·PE(+1) {v['dot_next']:.3f} "
                                         f"= 원점 {v['dot_origin']:.3f}; 학습형 표의 행: {_n(v['learned_defined'])}"),
    "position-vs-content": lambda v: (f"주제 짝 {v['partner_without']:.3f}→{v['partner_with']:.3f}, 이웃 "
                                      f"{v['neighbour_without']:.3f}→{v['neighbour_with']:.3f}"),
    "permutation": lambda v: (f"등변: 위치 없음 {_n(v['no_position'])}, 위치 고정 {_n(v['position_fixed'])}, "
                              f"위치가 따라감 {_n(v['position_travels'])}"),
    "pe-module": lambda v: (f"모양 {v['input_shape']}→{v['output_shape']}, 드롭아웃이 지운 비율 "
                            f"{v['dropout_zero_fraction']:.3f}, 부호 바뀜 {v['crossings_per_pair'][:4]}…"),
    "multihead-shapes": lambda v: (f"{v['input_shape']}→{v['output_shape']}, 가려진 키의 가중치 "
                                   f"{_n(v['masked_weight'])}, 가려진 키를 바꾼 효과 {_n(v['masked_keys_effect'])}"),
    "complexity": lambda v: (f"FLOP 기울기 cnn {v['flops_slope']['cnn']:.2f} rnn {v['flops_slope']['rnn']:.2f} attn "
                             f"{v['flops_slope']['attention']:.2f}; 경로 cnn {v['max_path_length']['cnn']} rnn "
                             f"{v['max_path_length']['rnn']} attn {v['max_path_length']['attention']}"),
    "encoder-decoder-causal": lambda v: (f"앞선 출력의 변화 {_n(v['max_change_before'])}, 자기 출력의 변화 ≥ "
                                         f"{_n(v['min_change_at'])}"),
    "exercises-depth": lambda v: (f"깊이 {v['depths'][-1]} 의 프로브 정확도: 잔차 {v['accuracy_residual'][-1]:.2f}, "
                                  f"잔차 없음 {v['accuracy_plain'][-1]:.2f} (처음 {v['accuracy_plain'][0]:.2f}; 우연 "
                                  f"{v['chance']:.2f})"),
    "exercises-learned": lambda v: ("정확도 " + ", ".join(f"{k} {_n(x, 2)}" for k, x in v["accuracy"].items())
                                    + "; 표 밖에서 학습형: " + _n(v["accuracy_beyond_table"]["learned"])),
    "exercises-relative": lambda v: ("이동 뒤 정확도 " + ", ".join(f"{k} {_n(x, 2)}"
                                                              for k, x in v["accuracy_shifted"].items())),
    "lookup-is-matmul": lambda v: (f"비트 단위로 같음 {_n(v['bitwise_equal'])}; FLOPs 조회 {v['flops']['lookup']} 대 "
                                   f"행렬곱 {v['flops']['one_hot_matmul']}"),
    "table-size": lambda v: f"파라미터 {v['parameters']}, 비율 {v['ratios']}",
    "tying": lambda v: f"묶음 {v['parameters']['tied']}, 따로 {v['parameters']['untied']}",
    "self-score": lambda v: ("자기 행이 가장 높은 비율: " + ", ".join(_n(x, 2) for x in v["self_top_fraction"])
                             + " (행 길이가 퍼질수록)"),
    "cosine-vs-dot": lambda v: (f"바뀐 코사인 목록 {v['cosine_lists_changed']}; 늘인 행이 맨 앞인 비율 "
                                + ", ".join(_n(x, 2) for x in v["dot_led_fraction"])),
    "sqrt-d": lambda v: (f"노름 비 {v['ratio_min']:.4f}…{v['ratio_max']:.4f} (√d {v['sqrt_d']:.4f}), 최소 코사인 "
                         f"{v['cosine_min']:.6f}"),
    "no-context": lambda v: (f"같은 번호, 최대 차이 {_n(v['max_difference'])}; 위치를 더하면 "
                             f"{_n(v['max_difference_with_positions'])}"),
}
