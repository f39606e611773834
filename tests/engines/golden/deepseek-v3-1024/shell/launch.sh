#!/bin/bash
# starts every node's processes over ssh (SSH overrides the command)
# Written by rankplan from plan a160fe780b0158a7... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-node-0}
host_1=${RANKPLAN_HOST_1:-node-1}
host_2=${RANKPLAN_HOST_2:-node-2}
host_3=${RANKPLAN_HOST_3:-node-3}
host_4=${RANKPLAN_HOST_4:-node-4}
host_5=${RANKPLAN_HOST_5:-node-5}
host_6=${RANKPLAN_HOST_6:-node-6}
host_7=${RANKPLAN_HOST_7:-node-7}
host_8=${RANKPLAN_HOST_8:-node-8}
host_9=${RANKPLAN_HOST_9:-node-9}
host_10=${RANKPLAN_HOST_10:-node-10}
host_11=${RANKPLAN_HOST_11:-node-11}
host_12=${RANKPLAN_HOST_12:-node-12}
host_13=${RANKPLAN_HOST_13:-node-13}
host_14=${RANKPLAN_HOST_14:-node-14}
host_15=${RANKPLAN_HOST_15:-node-15}
host_16=${RANKPLAN_HOST_16:-node-16}
host_17=${RANKPLAN_HOST_17:-node-17}
host_18=${RANKPLAN_HOST_18:-node-18}
host_19=${RANKPLAN_HOST_19:-node-19}
host_20=${RANKPLAN_HOST_20:-node-20}
host_21=${RANKPLAN_HOST_21:-node-21}
host_22=${RANKPLAN_HOST_22:-node-22}
host_23=${RANKPLAN_HOST_23:-node-23}
host_24=${RANKPLAN_HOST_24:-node-24}
host_25=${RANKPLAN_HOST_25:-node-25}
host_26=${RANKPLAN_HOST_26:-node-26}
host_27=${RANKPLAN_HOST_27:-node-27}
host_28=${RANKPLAN_HOST_28:-node-28}
host_29=${RANKPLAN_HOST_29:-node-29}
host_30=${RANKPLAN_HOST_30:-node-30}
host_31=${RANKPLAN_HOST_31:-node-31}
host_32=${RANKPLAN_HOST_32:-node-32}
host_33=${RANKPLAN_HOST_33:-node-33}
host_34=${RANKPLAN_HOST_34:-node-34}
host_35=${RANKPLAN_HOST_35:-node-35}
host_36=${RANKPLAN_HOST_36:-node-36}
host_37=${RANKPLAN_HOST_37:-node-37}
host_38=${RANKPLAN_HOST_38:-node-38}
host_39=${RANKPLAN_HOST_39:-node-39}
host_40=${RANKPLAN_HOST_40:-node-40}
host_41=${RANKPLAN_HOST_41:-node-41}
host_42=${RANKPLAN_HOST_42:-node-42}
host_43=${RANKPLAN_HOST_43:-node-43}
host_44=${RANKPLAN_HOST_44:-node-44}
host_45=${RANKPLAN_HOST_45:-node-45}
host_46=${RANKPLAN_HOST_46:-node-46}
host_47=${RANKPLAN_HOST_47:-node-47}
host_48=${RANKPLAN_HOST_48:-node-48}
host_49=${RANKPLAN_HOST_49:-node-49}
host_50=${RANKPLAN_HOST_50:-node-50}
host_51=${RANKPLAN_HOST_51:-node-51}
host_52=${RANKPLAN_HOST_52:-node-52}
host_53=${RANKPLAN_HOST_53:-node-53}
host_54=${RANKPLAN_HOST_54:-node-54}
host_55=${RANKPLAN_HOST_55:-node-55}
host_56=${RANKPLAN_HOST_56:-node-56}
host_57=${RANKPLAN_HOST_57:-node-57}
host_58=${RANKPLAN_HOST_58:-node-58}
host_59=${RANKPLAN_HOST_59:-node-59}
host_60=${RANKPLAN_HOST_60:-node-60}
host_61=${RANKPLAN_HOST_61:-node-61}
host_62=${RANKPLAN_HOST_62:-node-62}
host_63=${RANKPLAN_HOST_63:-node-63}
host_64=${RANKPLAN_HOST_64:-node-64}
host_65=${RANKPLAN_HOST_65:-node-65}
host_66=${RANKPLAN_HOST_66:-node-66}
host_67=${RANKPLAN_HOST_67:-node-67}
host_68=${RANKPLAN_HOST_68:-node-68}
host_69=${RANKPLAN_HOST_69:-node-69}
host_70=${RANKPLAN_HOST_70:-node-70}
host_71=${RANKPLAN_HOST_71:-node-71}
host_72=${RANKPLAN_HOST_72:-node-72}
host_73=${RANKPLAN_HOST_73:-node-73}
host_74=${RANKPLAN_HOST_74:-node-74}
host_75=${RANKPLAN_HOST_75:-node-75}
host_76=${RANKPLAN_HOST_76:-node-76}
host_77=${RANKPLAN_HOST_77:-node-77}
host_78=${RANKPLAN_HOST_78:-node-78}
host_79=${RANKPLAN_HOST_79:-node-79}
host_80=${RANKPLAN_HOST_80:-node-80}
host_81=${RANKPLAN_HOST_81:-node-81}
host_82=${RANKPLAN_HOST_82:-node-82}
host_83=${RANKPLAN_HOST_83:-node-83}
host_84=${RANKPLAN_HOST_84:-node-84}
host_85=${RANKPLAN_HOST_85:-node-85}
host_86=${RANKPLAN_HOST_86:-node-86}
host_87=${RANKPLAN_HOST_87:-node-87}
host_88=${RANKPLAN_HOST_88:-node-88}
host_89=${RANKPLAN_HOST_89:-node-89}
host_90=${RANKPLAN_HOST_90:-node-90}
host_91=${RANKPLAN_HOST_91:-node-91}
host_92=${RANKPLAN_HOST_92:-node-92}
host_93=${RANKPLAN_HOST_93:-node-93}
host_94=${RANKPLAN_HOST_94:-node-94}
host_95=${RANKPLAN_HOST_95:-node-95}
host_96=${RANKPLAN_HOST_96:-node-96}
host_97=${RANKPLAN_HOST_97:-node-97}
host_98=${RANKPLAN_HOST_98:-node-98}
host_99=${RANKPLAN_HOST_99:-node-99}
host_100=${RANKPLAN_HOST_100:-node-100}
host_101=${RANKPLAN_HOST_101:-node-101}
host_102=${RANKPLAN_HOST_102:-node-102}
host_103=${RANKPLAN_HOST_103:-node-103}
host_104=${RANKPLAN_HOST_104:-node-104}
host_105=${RANKPLAN_HOST_105:-node-105}
host_106=${RANKPLAN_HOST_106:-node-106}
host_107=${RANKPLAN_HOST_107:-node-107}
host_108=${RANKPLAN_HOST_108:-node-108}
host_109=${RANKPLAN_HOST_109:-node-109}
host_110=${RANKPLAN_HOST_110:-node-110}
host_111=${RANKPLAN_HOST_111:-node-111}
host_112=${RANKPLAN_HOST_112:-node-112}
host_113=${RANKPLAN_HOST_113:-node-113}
host_114=${RANKPLAN_HOST_114:-node-114}
host_115=${RANKPLAN_HOST_115:-node-115}
host_116=${RANKPLAN_HOST_116:-node-116}
host_117=${RANKPLAN_HOST_117:-node-117}
host_118=${RANKPLAN_HOST_118:-node-118}
host_119=${RANKPLAN_HOST_119:-node-119}
host_120=${RANKPLAN_HOST_120:-node-120}
host_121=${RANKPLAN_HOST_121:-node-121}
host_122=${RANKPLAN_HOST_122:-node-122}
host_123=${RANKPLAN_HOST_123:-node-123}
host_124=${RANKPLAN_HOST_124:-node-124}
host_125=${RANKPLAN_HOST_125:-node-125}
host_126=${RANKPLAN_HOST_126:-node-126}
host_127=${RANKPLAN_HOST_127:-node-127}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${RANKPLAN_DIR:-$here}
ssh=${SSH:-ssh}
env_args=( "RANKPLAN_HOST_0=${host_0}" "RANKPLAN_HOST_1=${host_1}" "RANKPLAN_HOST_2=${host_2}" "RANKPLAN_HOST_3=${host_3}" "RANKPLAN_HOST_4=${host_4}" "RANKPLAN_HOST_5=${host_5}" "RANKPLAN_HOST_6=${host_6}" "RANKPLAN_HOST_7=${host_7}" "RANKPLAN_HOST_8=${host_8}" "RANKPLAN_HOST_9=${host_9}" "RANKPLAN_HOST_10=${host_10}" "RANKPLAN_HOST_11=${host_11}" "RANKPLAN_HOST_12=${host_12}" "RANKPLAN_HOST_13=${host_13}" "RANKPLAN_HOST_14=${host_14}" "RANKPLAN_HOST_15=${host_15}" "RANKPLAN_HOST_16=${host_16}" "RANKPLAN_HOST_17=${host_17}" "RANKPLAN_HOST_18=${host_18}" "RANKPLAN_HOST_19=${host_19}" "RANKPLAN_HOST_20=${host_20}" "RANKPLAN_HOST_21=${host_21}" "RANKPLAN_HOST_22=${host_22}" "RANKPLAN_HOST_23=${host_23}" "RANKPLAN_HOST_24=${host_24}" "RANKPLAN_HOST_25=${host_25}" "RANKPLAN_HOST_26=${host_26}" "RANKPLAN_HOST_27=${host_27}" "RANKPLAN_HOST_28=${host_28}" "RANKPLAN_HOST_29=${host_29}" "RANKPLAN_HOST_30=${host_30}" "RANKPLAN_HOST_31=${host_31}" "RANKPLAN_HOST_32=${host_32}" "RANKPLAN_HOST_33=${host_33}" "RANKPLAN_HOST_34=${host_34}" "RANKPLAN_HOST_35=${host_35}" "RANKPLAN_HOST_36=${host_36}" "RANKPLAN_HOST_37=${host_37}" "RANKPLAN_HOST_38=${host_38}" "RANKPLAN_HOST_39=${host_39}" "RANKPLAN_HOST_40=${host_40}" "RANKPLAN_HOST_41=${host_41}" "RANKPLAN_HOST_42=${host_42}" "RANKPLAN_HOST_43=${host_43}" "RANKPLAN_HOST_44=${host_44}" "RANKPLAN_HOST_45=${host_45}" "RANKPLAN_HOST_46=${host_46}" "RANKPLAN_HOST_47=${host_47}" "RANKPLAN_HOST_48=${host_48}" "RANKPLAN_HOST_49=${host_49}" "RANKPLAN_HOST_50=${host_50}" "RANKPLAN_HOST_51=${host_51}" "RANKPLAN_HOST_52=${host_52}" "RANKPLAN_HOST_53=${host_53}" "RANKPLAN_HOST_54=${host_54}" "RANKPLAN_HOST_55=${host_55}" "RANKPLAN_HOST_56=${host_56}" "RANKPLAN_HOST_57=${host_57}" "RANKPLAN_HOST_58=${host_58}" "RANKPLAN_HOST_59=${host_59}" "RANKPLAN_HOST_60=${host_60}" "RANKPLAN_HOST_61=${host_61}" "RANKPLAN_HOST_62=${host_62}" "RANKPLAN_HOST_63=${host_63}" "RANKPLAN_HOST_64=${host_64}" "RANKPLAN_HOST_65=${host_65}" "RANKPLAN_HOST_66=${host_66}" "RANKPLAN_HOST_67=${host_67}" "RANKPLAN_HOST_68=${host_68}" "RANKPLAN_HOST_69=${host_69}" "RANKPLAN_HOST_70=${host_70}" "RANKPLAN_HOST_71=${host_71}" "RANKPLAN_HOST_72=${host_72}" "RANKPLAN_HOST_73=${host_73}" "RANKPLAN_HOST_74=${host_74}" "RANKPLAN_HOST_75=${host_75}" "RANKPLAN_HOST_76=${host_76}" "RANKPLAN_HOST_77=${host_77}" "RANKPLAN_HOST_78=${host_78}" "RANKPLAN_HOST_79=${host_79}" "RANKPLAN_HOST_80=${host_80}" "RANKPLAN_HOST_81=${host_81}" "RANKPLAN_HOST_82=${host_82}" "RANKPLAN_HOST_83=${host_83}" "RANKPLAN_HOST_84=${host_84}" "RANKPLAN_HOST_85=${host_85}" "RANKPLAN_HOST_86=${host_86}" "RANKPLAN_HOST_87=${host_87}" "RANKPLAN_HOST_88=${host_88}" "RANKPLAN_HOST_89=${host_89}" "RANKPLAN_HOST_90=${host_90}" "RANKPLAN_HOST_91=${host_91}" "RANKPLAN_HOST_92=${host_92}" "RANKPLAN_HOST_93=${host_93}" "RANKPLAN_HOST_94=${host_94}" "RANKPLAN_HOST_95=${host_95}" "RANKPLAN_HOST_96=${host_96}" "RANKPLAN_HOST_97=${host_97}" "RANKPLAN_HOST_98=${host_98}" "RANKPLAN_HOST_99=${host_99}" "RANKPLAN_HOST_100=${host_100}" "RANKPLAN_HOST_101=${host_101}" "RANKPLAN_HOST_102=${host_102}" "RANKPLAN_HOST_103=${host_103}" "RANKPLAN_HOST_104=${host_104}" "RANKPLAN_HOST_105=${host_105}" "RANKPLAN_HOST_106=${host_106}" "RANKPLAN_HOST_107=${host_107}" "RANKPLAN_HOST_108=${host_108}" "RANKPLAN_HOST_109=${host_109}" "RANKPLAN_HOST_110=${host_110}" "RANKPLAN_HOST_111=${host_111}" "RANKPLAN_HOST_112=${host_112}" "RANKPLAN_HOST_113=${host_113}" "RANKPLAN_HOST_114=${host_114}" "RANKPLAN_HOST_115=${host_115}" "RANKPLAN_HOST_116=${host_116}" "RANKPLAN_HOST_117=${host_117}" "RANKPLAN_HOST_118=${host_118}" "RANKPLAN_HOST_119=${host_119}" "RANKPLAN_HOST_120=${host_120}" "RANKPLAN_HOST_121=${host_121}" "RANKPLAN_HOST_122=${host_122}" "RANKPLAN_HOST_123=${host_123}" "RANKPLAN_HOST_124=${host_124}" "RANKPLAN_HOST_125=${host_125}" "RANKPLAN_HOST_126=${host_126}" "RANKPLAN_HOST_127=${host_127}" "RANKPLAN_LOG_DIR=${RANKPLAN_LOG_DIR:-$dir}")

printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-0.sh"
"$ssh" "${host_0}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-1.sh"
"$ssh" "${host_1}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-2.sh"
"$ssh" "${host_2}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-3.sh"
"$ssh" "${host_3}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-4.sh"
"$ssh" "${host_4}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-5.sh"
"$ssh" "${host_5}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-6.sh"
"$ssh" "${host_6}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-7.sh"
"$ssh" "${host_7}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-8.sh"
"$ssh" "${host_8}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-9.sh"
"$ssh" "${host_9}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-10.sh"
"$ssh" "${host_10}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-11.sh"
"$ssh" "${host_11}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-12.sh"
"$ssh" "${host_12}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-13.sh"
"$ssh" "${host_13}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-14.sh"
"$ssh" "${host_14}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-15.sh"
"$ssh" "${host_15}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-16.sh"
"$ssh" "${host_16}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-17.sh"
"$ssh" "${host_17}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-18.sh"
"$ssh" "${host_18}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-19.sh"
"$ssh" "${host_19}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-20.sh"
"$ssh" "${host_20}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-21.sh"
"$ssh" "${host_21}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-22.sh"
"$ssh" "${host_22}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-23.sh"
"$ssh" "${host_23}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-24.sh"
"$ssh" "${host_24}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-25.sh"
"$ssh" "${host_25}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-26.sh"
"$ssh" "${host_26}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-27.sh"
"$ssh" "${host_27}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-28.sh"
"$ssh" "${host_28}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-29.sh"
"$ssh" "${host_29}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-30.sh"
"$ssh" "${host_30}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-31.sh"
"$ssh" "${host_31}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-32.sh"
"$ssh" "${host_32}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-33.sh"
"$ssh" "${host_33}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-34.sh"
"$ssh" "${host_34}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-35.sh"
"$ssh" "${host_35}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-36.sh"
"$ssh" "${host_36}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-37.sh"
"$ssh" "${host_37}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-38.sh"
"$ssh" "${host_38}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-39.sh"
"$ssh" "${host_39}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-40.sh"
"$ssh" "${host_40}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-41.sh"
"$ssh" "${host_41}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-42.sh"
"$ssh" "${host_42}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-43.sh"
"$ssh" "${host_43}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-44.sh"
"$ssh" "${host_44}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-45.sh"
"$ssh" "${host_45}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-46.sh"
"$ssh" "${host_46}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-47.sh"
"$ssh" "${host_47}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-48.sh"
"$ssh" "${host_48}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-49.sh"
"$ssh" "${host_49}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-50.sh"
"$ssh" "${host_50}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-51.sh"
"$ssh" "${host_51}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-52.sh"
"$ssh" "${host_52}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-53.sh"
"$ssh" "${host_53}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-54.sh"
"$ssh" "${host_54}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-55.sh"
"$ssh" "${host_55}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-56.sh"
"$ssh" "${host_56}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-57.sh"
"$ssh" "${host_57}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-58.sh"
"$ssh" "${host_58}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-59.sh"
"$ssh" "${host_59}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-60.sh"
"$ssh" "${host_60}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-61.sh"
"$ssh" "${host_61}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-62.sh"
"$ssh" "${host_62}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-63.sh"
"$ssh" "${host_63}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-64.sh"
"$ssh" "${host_64}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-65.sh"
"$ssh" "${host_65}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-66.sh"
"$ssh" "${host_66}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-67.sh"
"$ssh" "${host_67}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-68.sh"
"$ssh" "${host_68}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-69.sh"
"$ssh" "${host_69}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-70.sh"
"$ssh" "${host_70}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-71.sh"
"$ssh" "${host_71}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-72.sh"
"$ssh" "${host_72}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-73.sh"
"$ssh" "${host_73}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-74.sh"
"$ssh" "${host_74}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-75.sh"
"$ssh" "${host_75}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-76.sh"
"$ssh" "${host_76}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-77.sh"
"$ssh" "${host_77}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-78.sh"
"$ssh" "${host_78}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-79.sh"
"$ssh" "${host_79}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-80.sh"
"$ssh" "${host_80}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-81.sh"
"$ssh" "${host_81}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-82.sh"
"$ssh" "${host_82}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-83.sh"
"$ssh" "${host_83}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-84.sh"
"$ssh" "${host_84}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-85.sh"
"$ssh" "${host_85}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-86.sh"
"$ssh" "${host_86}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-87.sh"
"$ssh" "${host_87}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-88.sh"
"$ssh" "${host_88}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-89.sh"
"$ssh" "${host_89}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-90.sh"
"$ssh" "${host_90}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-91.sh"
"$ssh" "${host_91}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-92.sh"
"$ssh" "${host_92}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-93.sh"
"$ssh" "${host_93}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-94.sh"
"$ssh" "${host_94}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-95.sh"
"$ssh" "${host_95}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-96.sh"
"$ssh" "${host_96}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-97.sh"
"$ssh" "${host_97}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-98.sh"
"$ssh" "${host_98}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-99.sh"
"$ssh" "${host_99}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-100.sh"
"$ssh" "${host_100}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-101.sh"
"$ssh" "${host_101}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-102.sh"
"$ssh" "${host_102}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-103.sh"
"$ssh" "${host_103}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-104.sh"
"$ssh" "${host_104}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-105.sh"
"$ssh" "${host_105}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-106.sh"
"$ssh" "${host_106}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-107.sh"
"$ssh" "${host_107}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-108.sh"
"$ssh" "${host_108}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-109.sh"
"$ssh" "${host_109}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-110.sh"
"$ssh" "${host_110}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-111.sh"
"$ssh" "${host_111}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-112.sh"
"$ssh" "${host_112}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-113.sh"
"$ssh" "${host_113}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-114.sh"
"$ssh" "${host_114}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-115.sh"
"$ssh" "${host_115}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-116.sh"
"$ssh" "${host_116}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-117.sh"
"$ssh" "${host_117}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-118.sh"
"$ssh" "${host_118}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-119.sh"
"$ssh" "${host_119}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-120.sh"
"$ssh" "${host_120}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-121.sh"
"$ssh" "${host_121}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-122.sh"
"$ssh" "${host_122}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-123.sh"
"$ssh" "${host_123}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-124.sh"
"$ssh" "${host_124}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-125.sh"
"$ssh" "${host_125}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-126.sh"
"$ssh" "${host_126}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-127.sh"
"$ssh" "${host_127}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/router.sh"
"$ssh" "${host_0}" "$cmd" &
# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
