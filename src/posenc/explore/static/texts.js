// Every visible text of the page, in English and Korean. Written for posenc; keys are used by app.js
// (data-i18n attributes and plot labels). {name} placeholders are filled in by app.js.
"use strict";

const TEXTS = {
  en: {
    lang_button: "한국어",
    lang_label: "Language",
    title: "posenc explore — positions at work",
    subtitle: "Pick a position scheme, change the width, the base, the length and the positions, and watch what " +
      "the scheme does to attention. Every number is computed by the same posenc functions the lab and the " +
      "models use.",
    controls: "Settings",
    scheme: "Scheme",
    family_additive: "added to the tokens",
    family_rotary: "rotating queries and keys",
    family_bias: "biasing the logits",
    family_none: "no positions",
    dim: "Width d",
    base: "Base",
    length: "Positions L",
    start: "Window start",
    window: "Window size",
    head: "Head",
    seed: "Seed",
    scale: "Content scale",
    scale_hint: "empty: √d/4, the lab's setting",
    options: "Options of this scheme",
    no_options: "This scheme has no options of its own.",
    optional_hint: "empty: the scheme decides",
    reset: "Reset",
    computing: "computing…",
    took: "server {view} ms (plots), {props} ms (property row)",
    error_title: "This value was refused",
    table_title_table: "Position table",
    table_title_angles: "Rotation angles",
    table_title_bias: "Attention bias",
    table_title_none: "No position table",
    table_help_table: "Row p is the vector added to the token at position p; the columns are its d coordinates. " +
      "In the sinusoid the first columns turn fast and the last ones slowly, like the hands of a clock: read " +
      "together they tell every position apart without ever growing.",
    table_help_angles: "A rotary scheme adds nothing to the tokens. It turns each pair of query and key " +
      "coordinates by the angle p·θ (shown folded into −π … π). Every pair turns at its own speed θ; the " +
      "scaled variants (linear, NTK, YaRN, Llama 3, …) change those speeds.",
    table_help_bias: "A bias scheme leaves the vectors alone and adds one number to each query–key logit. " +
      "Shown for the chosen head: rows are queries, columns keys.",
    table_help_none: "Without a position signal attention sees the tokens as an unordered bag: shuffle them and " +
      "the outputs shuffle the same way.",
    rows_every: "one position in {step} shown",
    profile_title: "Similarity against distance",
    profile_help: "For each distance δ, the mean of S(i, i + δ) over the positions. Red dots mark the distances " +
      "where the curve climbs again: the sinusoid's similarity does not fall steadily with distance, so " +
      "“closer means more similar” holds only roughly.",
    profile_stats: "rises at {increases} of {steps} steps; lowest {min} at δ = {argmin}; at the largest distance {last}",
    similarity_title: "Position-only similarity in the window",
    similarity_help: "Cell (i, j) compares position i with position j and nothing else. If the value depends on " +
      "i − j alone, every diagonal has a single colour — move the window start and the picture does not change.",
    invariant_yes: "depends on i − j only: yes",
    invariant_no: "depends on i − j only: no",
    attention_title: "Content against position",
    attention_help: "Six tokens: token 3 shares a topic with token 0, token 1 is its neighbour. The bars are " +
      "token 0's attention without positions and with this scheme, at the window start. Raise the content " +
      "scale and content takes the lead back.",
    attention_numbers: "token 0's attention",
    naive_title: "The naive way: the index as a coordinate",
    naive_help: "Write the index i as one extra coordinate. Its share of the logits, i·j/√5, grows with the " +
      "position until it drowns the content and the softmax puts everything on one token. A position signal " +
      "must differ from place to place, but must not grow with the place.",
    naive_stats: "at {start}–{end}: position part spans {pos}, content part {content}, largest probability {prob}",
    properties_title: "Property row",
    properties_help: "The same row `posenc lab properties` prints for these settings (d, L, base, seed), measured " +
      "on the scheme's position-only similarity.",
    prop_norm_constant: "Norm constant",
    prop_translation_invariant: "Depends on i − j only",
    prop_monotone_decay: "Decays with distance",
    prop_symmetric: "Symmetric",
    prop_shift_residual: "Shift residual",
    prop_defined_beyond: "Defined beyond L",
    yes: "yes",
    no: "no",
    na: "—",
    ax_position: "position",
    ax_coordinate: "coordinate",
    ax_pair: "rotation pair",
    ax_query: "query position",
    ax_key: "key position",
    ax_distance: "distance δ",
    ax_similarity: "mean similarity",
    ax_token: "token",
    ax_attention: "attention of token 0",
    ax_start: "window start",
    ax_spread: "spread of the logits",
    lg_profile: "S at distance δ",
    lg_rises: "rises again",
    lg_without: "without positions",
    lg_with: "with this scheme",
    lg_position_part: "position part",
    lg_content_part: "content part",
    lg_here: "your window",
    footer: "posenc explore runs on this machine only; nothing leaves it. Charts drawn with plotly.js (MIT licence).",
  },
  ko: {
    lang_button: "English",
    lang_label: "언어",
    title: "posenc explore — 위치 인코딩 들여다보기",
    subtitle: "위치 방식 하나를 고르고 폭, 밑, 길이, 위치를 바꿔 가며 그 방식이 어텐션에 무엇을 하는지 보세요. " +
      "모든 수는 posenc의 실험실과 모델이 쓰는 바로 그 함수로 계산합니다.",
    controls: "설정",
    scheme: "방식",
    family_additive: "토큰에 더하는 방식",
    family_rotary: "쿼리·키를 돌리는 방식",
    family_bias: "로짓에 편향을 더하는 방식",
    family_none: "위치 없음",
    dim: "폭 d",
    base: "밑(base)",
    length: "위치 수 L",
    start: "창 시작 위치",
    window: "창 크기",
    head: "헤드",
    seed: "시드",
    scale: "내용 크기",
    scale_hint: "비우면 √d/4 (실험실 설정)",
    options: "이 방식의 옵션",
    no_options: "이 방식에는 따로 정할 옵션이 없습니다.",
    optional_hint: "비우면 방식이 정합니다",
    reset: "처음 값으로",
    computing: "계산 중…",
    took: "서버 {view} ms (그림), {props} ms (성질 표)",
    error_title: "받아들일 수 없는 값입니다",
    table_title_table: "위치 표",
    table_title_angles: "회전 각",
    table_title_bias: "어텐션 편향",
    table_title_none: "위치 표 없음",
    table_help_table: "p번째 행은 p 자리 토큰에 더해지는 벡터이고, 열은 그 벡터의 좌표 d개입니다. 사인파에서는 " +
      "앞쪽 열이 빠르게, 뒤쪽 열이 느리게 돕니다. 시계 바늘처럼 함께 읽으면 값이 커지지 않고도 모든 자리를 " +
      "구별합니다.",
    table_help_angles: "회전 방식은 토큰에 아무것도 더하지 않습니다. 쿼리와 키의 좌표를 둘씩 묶어 p·θ 만큼 " +
      "돌립니다 (−π … π 안으로 접어 표시). 쌍마다 도는 속도 θ가 다르고, 스케일링 변형(linear, NTK, YaRN, " +
      "Llama 3 등)은 이 속도를 바꿉니다.",
    table_help_bias: "편향 방식은 벡터를 그대로 두고 쿼리–키 로짓마다 수를 하나 더합니다. 고른 헤드의 값이며, " +
      "행은 쿼리, 열은 키입니다.",
    table_help_none: "위치 신호가 없으면 어텐션은 토큰을 순서 없는 묶음으로 봅니다. 순서를 섞으면 출력도 똑같이 " +
      "섞일 뿐입니다.",
    rows_every: "{step}번째 위치마다 하나씩 표시",
    profile_title: "거리에 따른 유사도",
    profile_help: "거리 δ마다 여러 위치에서 잰 S(i, i + δ)의 평균입니다. 빨간 점은 곡선이 다시 올라가는 " +
      "거리입니다. 사인파의 유사도는 거리에 따라 꾸준히 줄지 않으므로 “가까울수록 비슷하다”는 대략만 맞습니다.",
    profile_stats: "{steps}걸음 중 {increases}번 다시 오름; 가장 낮은 값 {min} (δ = {argmin}); 가장 먼 거리에서 {last}",
    similarity_title: "창 안 위치끼리의 유사도",
    similarity_help: "(i, j) 칸은 내용 없이 위치 i와 위치 j만 비교합니다. 값이 i − j에만 의존하면 대각선마다 " +
      "색이 하나뿐이고, 창 시작 위치를 옮겨도 그림이 그대로입니다.",
    invariant_yes: "i − j에만 의존: 예",
    invariant_no: "i − j에만 의존: 아니오",
    attention_title: "내용과 위치의 경쟁",
    attention_help: "토큰 여섯 개 가운데 3번은 0번과 주제가 같고, 1번은 바로 옆자리입니다. 막대는 창 시작 " +
      "위치에서 위치 없이, 그리고 이 방식을 넣었을 때 0번 토큰이 주는 어텐션입니다. 내용 크기를 키우면 내용이 " +
      "다시 앞섭니다.",
    attention_numbers: "0번 토큰의 어텐션",
    naive_title: "순진한 방법: 위치 번호를 좌표로",
    naive_help: "위치 번호 i를 좌표 하나로 덧붙입니다. 로짓에서 그 몫 i·j/√5는 자리가 뒤로 갈수록 커져 내용을 " +
      "덮고, 소프트맥스는 한 토큰에 전부를 몰아줍니다. 위치 신호는 자리마다 달라야 하지만 자리가 뒤라고 커지면 " +
      "안 됩니다.",
    naive_stats: "{start}–{end} 위치: 위치 몫의 폭 {pos}, 내용 몫의 폭 {content}, 가장 큰 확률 {prob}",
    properties_title: "성질 표",
    properties_help: "같은 설정(d, L, 밑, 시드)에서 `posenc lab properties`가 내는 바로 그 행입니다. 방식이 " +
      "위치끼리 만드는 유사도에서 잽니다.",
    prop_norm_constant: "노름 일정",
    prop_translation_invariant: "i − j에만 의존",
    prop_monotone_decay: "거리에 따라 감소",
    prop_symmetric: "대칭",
    prop_shift_residual: "이동 잔차",
    prop_defined_beyond: "L 너머에서 정의",
    yes: "예",
    no: "아니오",
    na: "—",
    ax_position: "위치",
    ax_coordinate: "좌표",
    ax_pair: "회전 쌍",
    ax_query: "쿼리 위치",
    ax_key: "키 위치",
    ax_distance: "거리 δ",
    ax_similarity: "평균 유사도",
    ax_token: "토큰",
    ax_attention: "0번 토큰의 어텐션",
    ax_start: "창 시작 위치",
    ax_spread: "로짓의 폭",
    lg_profile: "거리 δ에서의 S",
    lg_rises: "다시 오르는 곳",
    lg_without: "위치 없음",
    lg_with: "이 방식 적용",
    lg_position_part: "위치 몫",
    lg_content_part: "내용 몫",
    lg_here: "지금 창",
    footer: "posenc explore는 이 컴퓨터 안에서만 돌고, 아무것도 밖으로 보내지 않습니다. 그래프는 plotly.js(MIT " +
      "라이선스)로 그립니다.",
  },
};
